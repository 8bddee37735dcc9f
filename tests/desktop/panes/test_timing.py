"""desktop.panes.timing: the timing bars plot the records' times, and say what was not measured."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from tests.desktop.panes.helpers import check_exports

pytestmark = pytest.mark.slow


def test_timing_bars_marker_and_click(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.timing import TimingPane

    pane = TimingPane(ran)
    qtbot.addWidget(pane)
    steps = ran.steps
    ran.request_select(len(steps) - 1)
    pane.render(ran.current_step())

    fwd = [s.timing.forward_ms for s in steps]
    own = {
        "forward": [s.timing.forward_ms - s.timing.forward_wait_ms for s in steps],
        "sample": [s.timing.sample_ms - s.timing.sample_wait_ms for s in steps],
        "capture": [s.timing.capture_ms - s.timing.capture_wait_ms for s in steps],
        "blocked": [s.timing.wait_ms - s.timing.queue_ms for s in steps],
        "queued": [s.timing.queue_ms for s in steps],
        "between": [s.timing.between_ms for s in steps],
    }
    bars = pane.bars
    base = np.zeros(len(steps))
    for key, heights in own.items():  # stacked in this order
        np.testing.assert_allclose(bars[key].opts["height"], heights)
        np.testing.assert_allclose(bars[key].opts["y0"], base)
        base = base + heights
    # the stack is each step's wall time: the loop's own total plus what happened between steps
    np.testing.assert_allclose(base, [s.timing.wall_ms for s in steps])
    np.testing.assert_allclose(
        base, [s.timing.total_ms + s.timing.between_ms for s in steps], rtol=1e-9
    )
    assert pane.marker.value() == len(steps) - 1
    summary = ran.summary
    assert f"TTFT {summary.ttft_ms:.1f} ms" in pane.stats_label.text()
    assert f"mean inter-token latency {summary.mean_itl_ms:.1f} ms" in pane.stats_label.text()
    assert f"prefill read {len(ran.prompt)} prompt tokens" in pane.explain_label.text()
    own = np.add(own["forward"], own["sample"])[1:] + np.array(own["capture"][1:])
    assert f"the model's own {own.mean():.1f} ms" in pane.stats_label.text()

    # selecting elsewhere moves the marker (through the controller's signal and the repaint)
    ran.request_select(2)
    qtbot.waitUntil(lambda: pane.marker.value() == 2, timeout=2000)

    # a click on the plot selects the step under it
    pane.resize(700, 450)
    pane.view.resize(700, 350)
    vb = pane.plot.vb
    vb.setRange(xRange=(-0.5, len(steps) - 0.5), padding=0)
    scene_pt = vb.mapViewToScene(QPointF(4, 1.0))
    widget_pt = pane.view.mapFromScene(scene_pt)
    qtbot.mouseClick(pane.view.viewport(), Qt.MouseButton.LeftButton, pos=widget_pt)
    qtbot.waitUntil(lambda: ran.selected == 4, timeout=2000)
    qtbot.waitUntil(lambda: pane.marker.value() == 4, timeout=2000)

    # dropping the dragged marker between steps selects the nearest and snaps onto it
    pane.marker.setValue(1.3)
    pane.marker.sigPositionChangeFinished.emit(pane.marker)
    assert ran.selected == 1 and pane.marker.value() == 1

    rows = check_exports(pane, tmp_path, len(steps))
    assert [float(r[1]) for r in rows] == pytest.approx(fwd)
    assert [float(r[4]) for r in rows] == pytest.approx([s.timing.total_ms for s in steps])

    pane.render(None)
    assert len(bars["forward"].opts["height"]) == 0 and not pane.marker.isVisible()


def test_timing_says_when_the_waits_were_not_measured(qtbot, ran, tmp_path):
    """Where the records could not measure the model thread's waits (several torch threads, a
    GPU that sleeps the thread), the pane says so instead of showing 0 ms of waiting, and the
    CSV leaves those cells empty."""
    import dataclasses

    from llm_lens.desktop.panes.timing import PARTS, UNMEASURED, TimingPane

    unmeasured = [
        dataclasses.replace(s, timing=dataclasses.replace(s.timing, waits_measured=False))
        for s in ran.steps
    ]
    ran.show_state(dataclasses.replace(ran.shown, steps=tuple(unmeasured)))
    pane = TimingPane(ran)
    qtbot.addWidget(pane)
    pane.render(ran.current_step())
    text = pane.stats_label.text()
    assert UNMEASURED in text and "waiting for the GIL" not in text
    assert "the model's own" not in text and "mean: forward + sample + capture" in text
    names = [label.text for _, label in pane.plot.legend.items]
    assert names == ["forward", "sample", "capture", "between steps"]  # no empty colours
    rows = check_exports(pane, tmp_path, len(unmeasured))
    assert [(r[5], r[6]) for r in rows] == [("", "")] * len(unmeasured)
    forward = [s.timing.forward_ms for s in ran.steps]
    assert [float(r[1]) for r in rows] == pytest.approx(forward)
    measured = [  # a later run that measured them: the colours come back, in order
        dataclasses.replace(s, timing=dataclasses.replace(s.timing, waits_measured=True))
        for s in unmeasured
    ]
    ran.show_state(dataclasses.replace(ran.shown, steps=tuple(measured)))
    pane.render(ran.current_step())
    names = [label.text for _, label in pane.plot.legend.items]
    assert names == [name for _, name, _ in PARTS]


def test_a_branch_says_which_steps_each_run_timed():
    from types import SimpleNamespace

    from llm_lens.desktop.panes.timing import branch_offset, runs_note

    assert runs_note(5, 3) == (
        "a branch: steps 0–2 were timed in the run it branched from, steps 3–4 in the branch itself"
    )
    assert runs_note(5, 0) == ""
    root = SimpleNamespace(run_id=1, parent_run_id=None, offset=0)
    branch = SimpleNamespace(run_id=4, parent_run_id=1, offset=6)
    ctl = SimpleNamespace(run_id=4, compare=SimpleNamespace(nodes=(root, branch)))
    assert branch_offset(ctl) == 6
    assert branch_offset(SimpleNamespace(run_id=1, compare=ctl.compare)) == 0


def test_waiting_for_a_core_is_said_to_be_the_machines_load():
    import numpy as np

    from llm_lens.desktop.panes.timing import waiting_note

    total = np.array([400.0, 150.0, 150.0])
    busy = {"total_ms": total, "queued": np.array([200.0, 90.0, 60.0])}
    assert waiting_note(busy).startswith(" 50% of the decode steps' time was waiting for a CPU")
    assert "not the model's work" in waiting_note(busy)
    quiet = {"total_ms": total, "queued": np.array([200.0, 10.0, 5.0])}
    assert waiting_note(quiet) == ""


@pytest.mark.slow
def test_a_branch_in_the_window_names_its_own_steps(qtbot, loaded_window):
    from llm_lens.core.sampling import GREEDY

    win = loaded_window
    ctl, pane = win.controller, win.panes["Timing"]
    with qtbot.waitSignals([ctl.sig_run_finished, ctl.compare.sig_tree_changed], timeout=120_000):
        ctl.request_run("Explain transformers like I am 12", True, GREEDY, 6)
    pane.render(ctl.current_step())
    assert "a branch" not in pane.stats_label.text()
    second = int(ctl.steps[3].top_ids[1])  # step 3 takes its second choice
    with qtbot.waitSignals([ctl.sig_run_finished, ctl.compare.sig_tree_changed], timeout=120_000):
        ctl.compare.request_branch(3, second, 3)
    pane.render(ctl.current_step())
    n = len(ctl.steps)
    assert (
        f"a branch: steps 0–3 were timed in the run it branched from, steps 4–{n - 1} in the "
        "branch itself"
    ) in pane.stats_label.text()
