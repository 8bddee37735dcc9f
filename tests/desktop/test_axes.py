"""Every pane's axes read the numbers they plot: no stale SI scale multiplies the tick labels.

pyqtgraph 0.14's ``AxisItem.enableAutoSIPrefix(False)`` still computes a scale from the axis's
range of that moment and keeps it: a pane shown again while its range is 0…0.6 read 100–500
under bars of 45 % from then on. These tests read the labels the axes would paint.
"""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtGui import QImage, QPainter

from llm_lens.core.sampling import GREEDY
from llm_lens.desktop.widgets.pane import plain_axis

pytestmark = pytest.mark.slow


def shown_tick_values(axis: pg.AxisItem) -> list[float]:
    """The numbers the axis paints as tick labels (token texts and other words left out)."""
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    values = []
    for *_rect, text in specs[2] if specs else []:
        try:
            values.append(float(text.replace("−", "-")))
        except ValueError:
            continue
    return values


def shown_scale(axis: pg.AxisItem) -> tuple[float, bool]:
    """The factor between the axis's data and its tick labels, and whether its label says so
    (pyqtgraph writes "(x0.001)" or a prefixed unit; the KV cache's byte axis names KiB, MiB)."""
    scale = axis.autoSIPrefixScale * axis.scale
    power = getattr(axis, "power", 0)  # ByteAxis: ticks in 1024**power bytes, named on the label
    if power:
        return scale / 1024.0**power, scale == 1.0
    said = "(x" in axis.labelString() or bool(axis.labelUnits)
    return scale, said


def axis_problems(pane) -> list[str]:
    """Each visible numeric axis whose tick labels leave its view range (or are scaled
    without saying so on the label)."""
    problems = []
    for view in pane.findChildren(pg.GraphicsView):
        for axis in view.scene().items():
            if not isinstance(axis, pg.AxisItem) or not axis.isVisible() or axis.logMode:
                continue
            if axis.linkedView() is None or axis._tickLevels is not None:
                continue  # fixed ticks (token names) carry no scale
            lo, hi = sorted(axis.range)
            slack = 0.02 * (hi - lo) + 1e-9
            scale, said = shown_scale(axis)
            if scale != 1.0 and not said:
                problems.append(f"{pane.title}: {axis.orientation} axis scaled ×{scale} unsaid")
            for value in shown_tick_values(axis):
                if not lo - slack <= value / (scale if said else 1.0) <= hi + slack:
                    problems.append(
                        f"{pane.title}: {axis.orientation} axis tick {value} outside {lo:.4g}…"
                        f"{hi:.4g} (label {axis.labelString()!r})"
                    )
    return problems


def show_every_pane(qtbot, win) -> None:
    """Render every pane, then hide and show it as a switch of tabs does (its show event is
    where the axes lost their prefix, and kept the scale of the range of that moment)."""
    for pane in win.panes.values():
        pane.render_and_paint()
        pane.hide()
        pane.show()
        qtbot.wait(10)


def test_plain_axis_forgets_a_scale_taken_while_disabling(qtbot):
    plot = pg.PlotItem()
    plot.setLabel("bottom", "probability")
    plot.setXRange(0.0, 0.6, padding=0)
    axis = plot.getAxis("bottom")
    axis.setRange(0.0, 0.6)
    plain_axis(axis)
    assert axis.autoSIPrefixScale == 1.0
    axis.enableAutoSIPrefix(False)  # pyqtgraph's own call keeps the stale 1000 (the bug)
    plain_axis(axis)
    assert axis.autoSIPrefixScale == 1.0 and axis.labelUnitPrefix == ""


def test_every_panes_ticks_lie_in_its_range_after_steps_and_a_branch(qtbot, loaded_window):
    win = loaded_window
    win.resize_to(1366, 768)
    ctl = win.controller
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run("Explain transformers like I am 12", True, GREEDY, 8)
    found = check_steps(qtbot, win, (0, 5, 7))
    second = int(ctl.steps[3].top_ids[1])  # a branch: step 3 takes its second choice
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.compare.request_branch(3, second, 4)
    assert ctl.steps[3].token.id == second
    found += check_steps(qtbot, win, (3, len(ctl.steps) - 1))
    assert not found, "\n".join(found)


def check_steps(qtbot, win, steps) -> list[str]:
    """Axis problems of every pane at each of ``steps``, each pane shown again at each."""
    found = []
    for step in steps:
        win.controller.request_select(step)
        show_every_pane(qtbot, win)
        show_every_pane(qtbot, win)  # shown again with this step's ranges in place
        for pane in win.panes.values():
            found += axis_problems(pane)
    return found
