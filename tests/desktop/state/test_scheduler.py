"""The repaint scheduler and a pane's render-then-paint unit: rates, one paint per render."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
from PySide6.QtCore import QEvent, QObject

from llm_lens.desktop.state.scheduler import REPAINT_MS

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")


class FakePane(QObject):
    """What the scheduler uses of a pane: the controller's busy flag and render_and_paint."""

    live_interval_ms = 250

    def __init__(self, busy: bool) -> None:
        super().__init__()
        self.controller = SimpleNamespace(busy=busy)
        self.rendered: list[float] = []

    def render_and_paint(self) -> None:
        self.rendered.append(time.monotonic())


def render_twice(qtbot, busy: bool) -> float:
    """Seconds between two renders asked for back to back."""
    from llm_lens.desktop.state.scheduler import RepaintScheduler

    sched, pane = RepaintScheduler(), FakePane(busy)
    sched.request(pane)
    qtbot.waitUntil(lambda: len(pane.rendered) == 1, timeout=2000)
    sched.request(pane)
    qtbot.waitUntil(lambda: len(pane.rendered) == 2, timeout=2000)
    return pane.rendered[1] - pane.rendered[0]


def test_heavy_panes_repaint_slower_only_while_a_run_streams(qtbot):
    assert render_twice(qtbot, busy=True) >= 0.25 - 0.005
    idle = render_twice(qtbot, busy=False)
    assert REPAINT_MS / 1e3 - 0.005 <= idle < 0.25


class PaintCounter(QObject):
    def __init__(self, widget) -> None:
        super().__init__()
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, _obj, event) -> bool:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.Paint:
            self.count += 1
        return False


def test_a_render_is_painted_once_inside_the_scheduler_unit(qtbot, ran):
    """The unit lays out, settles the view matrices and paints; nothing is left to repaint."""
    from llm_lens.desktop.panes.logits import LogitsPane

    pane = LogitsPane(ran)
    qtbot.addWidget(pane)
    pane.resize(700, 450)
    pane.show()
    qtbot.waitExposed(pane)
    for index in (1, 2, 1, 2):  # both steps' labels measured: the axis has its width
        ran.show_state(replace(ran.shown, selected=index))
        pane.render_and_paint()
        qtbot.wait(50)
    paints = PaintCounter(pane.plot_widget.viewport())
    ran.show_state(replace(ran.shown, selected=1))
    pane.render_and_paint()
    assert paints.count == 1
    assert pane.render_times_ms and pane.paint_times_ms
    qtbot.wait(100)
    assert paints.count == 1


class Resizes(QObject):
    """The widgets of ``root`` resized while it is installed: (class, old height, new height)."""

    def __init__(self, root) -> None:
        from PySide6.QtWidgets import QWidget

        super().__init__()
        self.seen: list[tuple[str, int, int]] = []
        self.widgets = [root, *root.findChildren(QWidget)]
        for widget in self.widgets:
            widget.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.Resize:
            self.seen.append((type(obj).__name__, event.oldSize().height(), event.size().height()))
        return False

    def remove(self) -> None:
        for widget in self.widgets:
            widget.removeEventFilter(self)


@pytest.mark.parametrize("width", [340, 420])
def test_a_unit_lays_out_its_cards_new_height_too(qtbot, ran, width):
    """A label's new text asks for the pane's layout, which re-wraps the card's headline; the
    card's new height asks for the pane's layout again: all inside the unit. Left to the event
    loop, the pane's second layout resized its plot a few pixels after the unit and painted it
    again, beside the model's prefill (a fast model's first token 10-25 % slower)."""
    from llm_lens.desktop.panes.timing import TimingPane
    from llm_lens.desktop.teaching.cards import install_cards

    pane = TimingPane(ran)
    install_cards({"Timing": pane}, ran)
    qtbot.addWidget(pane)
    pane.resize(width, 320)
    pane.show()
    qtbot.waitExposed(pane)
    resized = 0
    for stale in (True, False, True, False):  # cleared and drawn for a run, then drawn again
        during = Resizes(pane)
        pane._stale = stale
        pane.render_and_paint()
        during.remove()
        resized += len(during.seen)
        after = Resizes(pane)
        qtbot.wait(50)
        after.remove()
        assert after.seen == [], stale
    assert resized > 0  # the units did lay out something


def test_a_streaming_pane_not_yet_due_is_waited_for_not_polled(qtbot, monkeypatch):
    """After its rest, a pane inside its live interval is woken for once it is due: every
    wake of the GUI thread while a run streams takes the GIL from the model thread."""
    from llm_lens.desktop.state import scheduler as module

    wakes = []
    run_next = module.RepaintScheduler._next
    monkeypatch.setattr(
        module.RepaintScheduler, "_next", lambda self: (wakes.append(1), run_next(self))
    )
    gap = render_twice(qtbot, busy=True)
    assert gap >= FakePane.live_interval_ms / 1e3 - 0.005
    assert len(wakes) <= 6, f"{len(wakes)} wakes for two renders {gap * 1e3:.0f} ms apart"
