"""desktop.window.window_layout: the window's default size and a stored layout's version."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSettings


def test_a_stored_old_layout_does_not_bring_back_a_2011_px_window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path))
    from llm_lens.desktop.window.main_window import MainWindow, settings
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
