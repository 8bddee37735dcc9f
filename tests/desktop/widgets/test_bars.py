"""desktop.widgets.bars: the rank labels, bar ends and bar items the Logits and Sampling panes
draw their probabilities with."""

from __future__ import annotations

import math

import numpy as np

from llm_lens.desktop.widgets.bars import (
    BAR_BRUSH,
    LABEL_CHARS,
    bar_values,
    horizontal_bars,
    tick_label,
)


def test_a_tick_label_is_the_rank_and_the_visible_text_cut_to_fit():
    assert tick_label(1, " the") == "1. ·the"
    assert tick_label(12, "a\nb") == "12. a↵b"
    long = tick_label(2, "x" * 40)
    assert long == "2. " + "x" * (LABEL_CHARS - 1) + "…"
    assert len(long) == len("2. ") + LABEL_CHARS


def test_linear_bars_end_at_the_probabilities_from_zero():
    probs = np.array([0.5, 0.25, 0.125], np.float32)
    ends, base = bar_values(probs, log=False)
    assert ends.dtype == np.float64 and base == 0.0
    np.testing.assert_array_equal(ends, [0.5, 0.25, 0.125])


def test_log_bars_start_below_the_smallest_and_survive_a_zero():
    ends, base = bar_values(np.array([0.1, 0.001, 0.0], np.float32), log=True)
    np.testing.assert_allclose(ends[:2], [-1.0, -3.0], atol=1e-6)
    assert ends[2] == -30.0  # a zero probability is floored at 1e-30, not -inf
    assert base == math.floor(-30.0) - 0.5 and base < ends.min()


def test_horizontal_bars_are_built_empty_one_per_row():
    bars = horizontal_bars(4)
    opts = bars.opts
    np.testing.assert_array_equal(opts["y"], [0, 1, 2, 3])
    np.testing.assert_array_equal(opts["width"], np.zeros(4))
    np.testing.assert_array_equal(opts["x0"], np.zeros(4))
    assert opts["height"] == 0.75 and opts["brushes"] == [BAR_BRUSH] * 4
