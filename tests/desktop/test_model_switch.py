"""Opening another model: unsaved runs are offered a save first (as quitting does), and once
the model is switched nothing of the old one is on screen (response, step label, Branches
table, the "recorded" badge, the panes)."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QMessageBox

from llm_lens.core.sampling import GREEDY

pytestmark = pytest.mark.slow


@pytest.fixture
def asked(monkeypatch):
    """The questions the window asks, answered with ``asked.answer`` (Cancel at first)."""

    class Asked(list):
        answer = QMessageBox.StandardButton.Cancel

    questions = Asked()

    def question(_parent, title, text, *_args):
        questions.append((title, text))
        return questions.answer

    monkeypatch.setattr(QMessageBox, "question", staticmethod(question))
    return questions


def _run(qtbot, win, tokens=4):
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        win.controller.request_run("Explain transformers like I am 12", True, GREEDY, tokens)


def assert_nothing_of_the_old_model(win) -> None:
    panel = win.prompt_panel
    assert win.controller.steps == ()
    assert panel.response.toPlainText() == ""
    assert panel.step_label.text() == "no run yet"
    assert panel.slider.maximum() == 0
    assert not win.recorded_label.isVisibleTo(win)
    assert "(recorded)" not in win.windowTitle()
    assert win.panes["Logits"].info.text() == "no step selected"


def test_switching_model_with_unsaved_runs_asks_first(qtbot, loaded_window, asked):
    win = loaded_window
    win.sessions.confirm_close = True
    _run(qtbot, win)
    assert win.controller.dirty
    branches = win.open_branch()
    qtbot.waitUntil(lambda: branches.table.rowCount() > 0, timeout=5000)
    loads = []
    win.controller.sig_model_loading.connect(lambda *a: loads.append(a))

    win.load(None)  # Cancel: nothing happens
    assert len(asked) == 1 and "Save the runs" in asked[0][1]
    qtbot.wait(200)
    assert not loads and len(win.controller.steps) == 4
    assert win.prompt_panel.response.toPlainText()

    asked.answer = QMessageBox.StandardButton.Discard
    with qtbot.waitSignal(win.controller.sig_model_loaded, timeout=120_000):
        win.load(None)
    assert len(asked) == 2
    qtbot.waitUntil(lambda: branches.table.rowCount() == 0, timeout=5000)
    assert "select a step" in branches.header.text()
    assert_nothing_of_the_old_model(win)


def test_a_reopened_session_leaves_no_recorded_badge_after_a_switch(
    qtbot, loaded_window, asked, tmp_path
):
    win = loaded_window
    ctl = win.controller
    _run(qtbot, win, tokens=3)
    path = str(tmp_path / "run.llmlens")
    with qtbot.waitSignal(ctl.sig_saved, timeout=120_000):
        ctl.sessions.request_save(path, with_views=False, everything=False)
    with qtbot.waitSignal(ctl.sig_session_changed, timeout=60_000):
        win.sessions.open(path)
    qtbot.waitUntil(lambda: win.recorded_label.isVisibleTo(win), timeout=5000)
    assert win.prompt_panel.response.toPlainText()
    with qtbot.waitSignal(ctl.sig_model_loaded, timeout=120_000):
        win.load(None)  # nothing unsaved: no question
    assert not asked
    assert_nothing_of_the_old_model(win)
