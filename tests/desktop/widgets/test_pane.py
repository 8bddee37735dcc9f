"""While a run streams, a pane that is not on screen (a tab behind another) does not render: no
Python on the GUI thread for it. It renders when shown, or when the run ends."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QTabWidget

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")


def test_hidden_panes_wait_while_a_run_streams(qtbot, ran):
    from llm_lens.desktop.panes.timing import TimingPane

    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    front, behind = TimingPane(ran), TimingPane(ran)
    tabs.addTab(front, "front")
    tabs.addTab(behind, "behind")
    tabs.resize(600, 400)
    tabs.show()
    qtbot.waitExposed(tabs)
    loose = TimingPane(ran)  # in no shown window: a test, an export; always renders
    qtbot.addWidget(loose)
    ran.set_busy(True)  # a run streaming in
    try:
        for pane in (front, behind, loose):
            pane.render_times_ms.clear()
            pane.render_and_paint()
        assert front.render_times_ms and loose.render_times_ms
        assert not behind.render_times_ms and behind.hidden_while_streaming()
        tabs.setCurrentIndex(1)  # shown: the deferred render comes
        qtbot.waitUntil(lambda: bool(behind.render_times_ms), timeout=2000)
        assert behind.marker.value() == ran.current_step().index

        front.render_times_ms.clear()
        front.render_and_paint()  # now behind
        assert not front.render_times_ms
    finally:
        ran.set_busy(False)
    ran.sig_busy_changed.emit(False)  # the run ended: the hidden pane shows its last step
    qtbot.waitUntil(lambda: bool(front.render_times_ms), timeout=2000)


def test_a_dock_tab_behind_another_waits_while_a_run_streams(qtbot, loaded_window):
    """The window's panes sit in tabbed docks, and Qt keeps a dock behind another's tab
    visible (the tabs share one place; the selected one is raised). Its pane must still wait:
    in the default layout nine of twelve panes are behind a tab, and their renders took the
    streaming budget from the three on screen."""
    win = loaded_window
    logits, timing = win.panes["Logits"], win.panes["Timing"]
    win.tabifyDockWidget(win.docks["Logits"], win.docks["Timing"])
    win.docks["Logits"].raise_()
    qtbot.waitUntil(lambda: timing.visibleRegion().isEmpty(), timeout=2000)
    assert timing.isVisible()  # what Qt says of a tab behind another
    ctl = win.controller
    ctl.set_busy(True)  # a run streaming in
    try:
        for pane in (logits, timing):
            pane.render_times_ms.clear()
            pane.render_and_paint()
        assert logits.render_times_ms and not timing.render_times_ms
        assert timing.hidden_while_streaming() and not logits.hidden_while_streaming()
        win.docks["Timing"].raise_()  # its tab selected: the skipped render comes now
        qtbot.waitUntil(lambda: bool(timing.render_times_ms), timeout=2000)
        assert logits.hidden_while_streaming() and not timing.hidden_while_streaming()
    finally:
        ctl.set_busy(False)
