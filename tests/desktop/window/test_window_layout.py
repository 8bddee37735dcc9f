"""desktop.window.window_layout: the window's default size and a stored layout's version."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QByteArray, QSettings


def test_a_stored_old_layout_does_not_bring_back_a_2011_px_window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path))
    from llm_lens.desktop.window.contents import settings
    from llm_lens.desktop.window.main_window import MainWindow
    from llm_lens.desktop.window.window_layout import default_size

    old = MainWindow()
    qtbot.addWidget(old)
    old.setMinimumWidth(2011)  # what the version-1 layout forced
    old.resize(2011, 768)
    geometry, state = old.saveGeometry(), old.saveState(1)
    old.setMinimumWidth(0)
    old.controller.shutdown()
    s = settings()
    s.setValue("geometry", geometry)
    s.setValue("windowState", state)  # as version 1 wrote them: no layoutVersion
    s.sync()
    assert isinstance(QSettings(str(tmp_path / "llm-lens.ini"), QSettings.Format.IniFormat)
                      .value("geometry"), QByteArray)  # fmt: skip
    win = MainWindow()
    qtbot.addWidget(win)
    assert (win.width(), win.height()) == default_size()
    assert win.width() < 2011
    win.controller.shutdown()


def _docks(qtbot):
    from PySide6.QtWidgets import QDockWidget, QLabel, QMainWindow

    from llm_lens.desktop.window.window_layout import JOURNEY

    win = QMainWindow()
    qtbot.addWidget(win)
    win.setCentralWidget(QLabel("prompt strip"))
    docks = {}
    for title in JOURNEY:
        dock = QDockWidget(title, win)
        dock.setObjectName(title)
        dock.setWidget(QLabel(title))
        docks[title] = dock
    return win, docks


def test_the_journey_splits_into_two_groups_or_three_from_1700_px():
    from llm_lens.desktop.window.window_layout import JOURNEY, WIDE_FROM, groups_for

    narrow, wide = groups_for(WIDE_FROM - 1), groups_for(WIDE_FROM)
    assert len(narrow) == 2 and len(wide) == 3
    for groups in (narrow, wide):
        assert tuple(n for g in groups for n in g) == JOURNEY  # each pane once, in order
    assert narrow[0][-1] == "What if?" and wide[0] == ("Tokens", "Embeddings", "Positions")


@pytest.mark.parametrize("width", [1366, 1920])
def test_arrange_tabs_each_group_together_every_pane_one_click_away(qtbot, width):
    from llm_lens.desktop.window.window_layout import (
        arrange,
        groups_for,
        one_click_away,
        raise_first,
    )

    win, docks = _docks(qtbot)
    win.resize(width, 800)
    arrange(win, docks, width, 800)
    win.show()
    qtbot.waitExposed(win)
    raise_first(docks, width)
    for group in groups_for(width):
        tabbed = {d.windowTitle() for d in win.tabifiedDockWidgets(docks[group[0]])}
        assert tabbed == set(group) - {group[0]}
    assert all(one_click_away(win, d) for d in docks.values())
    docks["Timing"].close()
    assert not one_click_away(win, docks["Timing"])


def test_focus_mode_shows_one_dock_alone_and_puts_the_others_back(qtbot):
    from llm_lens.desktop.window.window_layout import FocusMode, arrange

    win, docks = _docks(qtbot)
    win.resize(1366, 768)
    arrange(win, docks, 1366, 768)
    win.show()
    qtbot.waitExposed(win)
    before = {t for t, d in docks.items() if d.isVisible()}
    focus = FocusMode(win, version=1)
    assert not focus.active
    assert focus.toggle(docks["Sampling"])
    assert focus.active and focus.focused is docks["Sampling"]
    assert [t for t, d in docks.items() if d.isVisible()] == ["Sampling"]
    assert not win.centralWidget().isVisible()
    assert focus.toggle()  # leaves
    assert not focus.active and focus.focused is None
    assert {t for t, d in docks.items() if d.isVisible()} == before
    assert win.centralWidget().isVisible()


def test_the_default_size_fits_the_screen_within_the_layouts_range(qtbot):
    from PySide6.QtGui import QGuiApplication

    from llm_lens.desktop.window.window_layout import default_size

    width, height = default_size()
    free = QGuiApplication.primaryScreen().availableGeometry()
    assert width == max(1280, min(1600, free.width()))
    assert height == max(720, min(1000, free.height()))
