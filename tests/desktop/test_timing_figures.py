"""Timing says one set of figures for one run (the prefill as TTFT, a decode step as the mean
inter-token latency in the pane, its explanation and the card, parts that add up to the mean),
and its legend covers no bar."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PySide6.QtCore import QPointF

pytestmark = pytest.mark.slow


def _figures(text: str) -> list[float]:
    """The durations a text names (not a per-token cost such as '4.49 ms per token')."""
    return [float(x) for x in re.findall(r"(\d+\.\d+) ms(?! per token)", text)]


def test_one_set_of_per_step_figures(qtbot, ran):
    from llm_lens.core.cards import timing_card
    from llm_lens.desktop.panes.timing import TimingPane

    pane = TimingPane(ran)
    qtbot.addWidget(pane)
    ran.request_select(len(ran.steps) - 1)
    pane.render(ran.current_step())
    stats, said = pane.stats_label.text(), pane.explain_label.text()
    card = timing_card(ran.steps, len(ran.prompt)).headline
    totals = np.array([s.timing.total_ms for s in ran.steps])
    ttft, mean = totals[0], float(totals[1:].mean())
    first_two = stats.splitlines()[:2]
    allowed = {f"{v:.1f}" for v in (ttft, mean)}
    # the prefill is TTFT everywhere; a decode step is the mean, named, in the card too
    assert f"{ttft:.1f}" in card and f"TTFT {ttft:.1f} ms" in stats
    assert f"in {ttft:.1f} ms" in said
    assert f"{mean:.1f} ms (mean inter-token latency)" in card
    assert f"mean inter-token latency {mean:.1f} ms" in stats
    assert f"{mean:.1f} ms (mean inter-token latency)" in said
    assert "median" not in stats + said + card
    said_steps = {f"{v:.1f}" for v in _figures(said)}
    assert said_steps <= allowed, said
    assert "~" not in said
    # the second line's parts add up to the mean it names
    parts = _figures(first_two[1])
    assert parts[-2] == pytest.approx(mean, abs=0.05) and f"{mean:.1f}" in first_two[0]
    assert sum(parts[:3]) == pytest.approx(parts[3], abs=0.2), first_two[1]


@pytest.mark.parametrize("size", [(680, 540), (636, 770), (460, 400)])
def test_the_legend_covers_no_bar(qtbot, ran, size):
    import dataclasses

    from llm_lens.desktop.panes.timing import TimingPane, timings

    steps = list(ran.steps)  # the last step as tall as the prefill: under the legend's corner
    tall = dataclasses.replace(steps[-1].timing, between_ms=steps[0].timing.wall_ms)
    steps[-1] = dataclasses.replace(steps[-1], timing=tall)
    ran.show_state(dataclasses.replace(ran.shown, steps=tuple(steps)))
    pane = TimingPane(ran)
    qtbot.addWidget(pane)
    pane.resize(*size)
    pane.show()
    ran.request_select(len(ran.steps) - 1)
    qtbot.wait(50)
    pane.render_and_paint()
    qtbot.wait(50)
    legend = pane.plot.legend.sceneBoundingRect()
    vb = pane.plot.vb
    tops = timings(ran.steps)["wall_ms"]
    shown = pane.plot.legend.isVisible()
    for i, top in enumerate(tops if shown else ()):
        for dx in (-0.4, 0.0, 0.4):
            point = vb.mapViewToScene(QPointF(i + dx, top))
            assert not legend.contains(point), (i, top, legend)
    assert vb.viewRange()[1][1] > tops.max()  # the tallest bar is inside the plot
    assert shown or size[1] < 500  # the panes of the screenshots' sizes have room for it
