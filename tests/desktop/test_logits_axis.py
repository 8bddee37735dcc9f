"""The Logits pane's probability axis stops at 1: the room past the longest bar holds its
label, not a probability of 1.1."""

from __future__ import annotations

import pytest

from llm_lens.desktop.panes.logits import probability_ticks


@pytest.mark.parametrize("top", [0.9121, 1.0, 0.4567, 0.11, 0.03])
def test_probability_ticks_stay_within_0_and_the_longest_bar(top):
    ticks = probability_ticks(top)
    values = [v for v, _ in ticks]
    assert len(values) >= 3 and values[0] == 0.0
    assert all(0.0 <= v <= min(top, 1.0) + 1e-9 for v in values), ticks
    assert all(label == f"{v:g}" for v, label in ticks)


@pytest.mark.slow
def test_the_logits_axis_reads_no_probability_past_1(qtbot, ran):
    from llm_lens.desktop.panes.logits import LogitsPane

    pane = LogitsPane(ran)
    qtbot.addWidget(pane)
    pane.resize(680, 540)
    pane.show()
    ran.request_select(0)
    pane.render(ran.current_step())
    axis = pane.plot.getAxis("bottom")
    assert pane.plot.vb.viewRange()[0][1] > ran.steps[0].prob  # room for the labels
    values = [v for level in axis._tickLevels for v, _ in level]
    assert values and max(values) <= 1.0
    pane.log_scale.setChecked(True)  # log10 probabilities: pyqtgraph's own ticks again
    pane.render(ran.current_step())
    assert axis._tickLevels is None
