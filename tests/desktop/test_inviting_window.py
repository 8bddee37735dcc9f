"""An empty window that invites: before the first run every pane says in one line what it will
show and how to get there, no card is a bare ▸, and the example run is one key away."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

pytestmark = pytest.mark.slow


def test_each_pane_says_what_it_will_show_before_the_first_run(qtbot, loaded_window):
    win = loaded_window
    qtbot.wait(300)  # the renders the model's loading schedules
    for title, pane in win.panes.items():
        note = pane.empty_note
        assert note.isVisibleTo(pane), title
        assert note.text().strip() and "\n" not in note.text(), title
        assert "Ctrl+Enter" in note.text(), title
        assert note.parent() is pane and note.geometry().intersects(pane.rect()), title
        assert pane.card is not None and pane.card.headline.text().strip(), title
    assert "example" in win.panes["Tokens"].empty_note.text()
    notes = {p.empty_note.text() for p in win.panes.values()}
    assert len(notes) == len(win.panes)  # each says what it will show, not one generic line


def test_the_example_runs_on_one_key_and_the_notes_go(qtbot, loaded_window):
    win = loaded_window
    panel = win.prompt_panel
    assert panel.editor.toPlainText() == panel.examples[0]["text"]  # the example is loaded
    panel.max_tokens.setValue(2)
    win.activateWindow()
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        QTest.keyClick(panel.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    shown = [win.panes[t] for t in ("Tokens", "Logits")]
    for pane in shown:
        dock = win.docks[pane.title]
        dock.show()
        dock.raise_()
    qtbot.waitUntil(lambda: not any(p.empty_note.isVisibleTo(p) for p in shown), timeout=20_000)
    assert all(p.card.headline.text() != "" for p in shown)
