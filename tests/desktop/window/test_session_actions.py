"""Sessions in the window: save, reopen (with and without the model), bad files, exports,
drag-and-drop, the unsaved-changes prompt and crash recovery."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QMessageBox

from llm_lens.core.sampling import GREEDY
from llm_lens.core.sessions.compact import kept_ids, weight_error_bound
from llm_lens.core.sessions.read import load_session


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path / "config"))
    from llm_lens.desktop.window.main_window import MainWindow

    win = MainWindow()
    win.sessions.confirm_close = False
    qtbot.addWidget(win)
    yield win
    win.close()


def _load_and_run(qtbot, win, tokens=5):
    with qtbot.waitSignal(win.controller.sig_model_loaded, timeout=120_000):
        win.load(None)
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        win.controller.request_run("Explain transformers like I am 12", True, GREEDY, tokens)


def _saved(qtbot, ctl, path):
    """Wait for ``sig_saved`` of this path (autosaves after each run emit it too)."""
    return qtbot.waitSignal(
        ctl.sig_saved, timeout=120_000, check_params_cb=lambda p, _size: p == str(path)
    )


def _save(qtbot, ctl, path):
    with _saved(qtbot, ctl, path) as blocker:
        ctl.sessions.request_save(str(path))
    return blocker.args


def test_save_then_reopen_without_the_model(qtbot, window, tmp_path):
    _load_and_run(qtbot, window)
    ctl = window.controller
    live_steps = list(ctl.steps)
    live_lens = _wait(qtbot, ctl, "lens", step=3, k=5)
    path = tmp_path / "run.llmlens"
    saved_path, size = _save(qtbot, ctl, path)
    assert saved_path == str(path) and size == path.stat().st_size and not ctl.dirty

    fresh = _open_without_model(qtbot, path)
    other = fresh.controller
    assert other.model_info is None and other.recorded is not None
    assert [s.token.id for s in other.steps] == [s.token.id for s in live_steps]
    for a, b in zip(other.steps, live_steps, strict=True):
        # session format 3: the top-N logits exact, the kept ones float16, residual norms
        assert np.array_equal(a.logits[b.top_ids], b.logits[b.top_ids])
        kept = kept_ids(b)
        np.testing.assert_allclose(a.logits[kept], b.logits[kept], rtol=1e-3, atol=1e-6)
        np.testing.assert_allclose(a.residual_norms, b.residual_norms, rtol=1e-6)
        np.testing.assert_allclose(a.mlp_norms, b.mlp_norms, rtol=1e-5, atol=1e-5)
        assert np.all(np.abs(a.attention - b.attention) <= weight_error_bound(b.attention) + 1e-6)
    lens = other.request_analysis("lens", step=3, k=5)  # answered from the recording
    assert np.array_equal(lens.top_ids, live_lens.top_ids)
    qtbot.waitUntil(lambda: all(p.render_times_ms for p in fresh.panes.values()), timeout=10_000)
    assert fresh.recorded_label.isVisibleTo(fresh) and "(recorded)" in fresh.windowTitle()
    assert str(path) in fresh.sessions.recent()
    fresh.close()


def _open_without_model(qtbot, path):
    """A fresh window with no model loaded, once it shows the session file at ``path``."""
    from llm_lens.desktop.window.main_window import MainWindow

    fresh = MainWindow()  # no model loaded in this one
    fresh.sessions.confirm_close = False
    qtbot.addWidget(fresh)
    with qtbot.waitSignal(fresh.controller.sig_run_finished, timeout=60_000):
        fresh.sessions.open(str(path))
    return fresh


def _wait(qtbot, ctl, kind, **args):
    qtbot.waitUntil(lambda: ctl.request_analysis(kind, **args) is not None, timeout=60_000)
    return ctl.request_analysis(kind, **args)


def test_a_bad_file_is_a_message_and_loses_nothing(qtbot, window, tmp_path):
    _load_and_run(qtbot, window, tokens=3)
    ctl = window.controller
    before = [s.token.id for s in ctl.steps]
    bad = tmp_path / "bad.llmlens"
    bad.write_bytes(b"this is not a session")
    with qtbot.waitSignal(ctl.sig_error, timeout=30_000) as blocker:
        window.sessions.open(str(bad))
    assert "not an LLM Lens session" in blocker.args[0]
    assert not window.prompt_panel.error.isHidden()
    assert [s.token.id for s in ctl.steps] == before and ctl.recorded is None


def test_exports_of_the_shown_run(qtbot, window, tmp_path):
    _load_and_run(qtbot, window, tokens=4)
    ctl = window.controller
    with _saved(qtbot, ctl, tmp_path / "t.json"):
        ctl.sessions.request_export("trace", str(tmp_path / "t.json"))
    data = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert [s["token_id"] for s in data["steps"]] == [s.token.id for s in ctl.steps]
    assert len(data["steps"][0]["logit_lens"]) == 31
    with _saved(qtbot, ctl, tmp_path / "r.html"):
        ctl.sessions.request_export("report", str(tmp_path / "r.html"))
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Explain transformers like I am 12" in html and "time to first token" in html
    assert html.count("<tr><td class=num>") == 4


def test_drop_a_session_file_opens_it(qtbot, window, tmp_path):
    _load_and_run(qtbot, window, tokens=3)
    path = tmp_path / "drop.llmlens"
    _save(qtbot, window.controller, path)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    event = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime,
                       Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)  # fmt: skip
    with qtbot.waitSignal(window.controller.sig_run_finished, timeout=60_000):
        window.dropEvent(event)
    assert window.controller.recorded is not None and len(window.controller.steps) == 3


def test_unsaved_run_asks_before_closing(qtbot, window, monkeypatch):
    _load_and_run(qtbot, window, tokens=2)
    assert window.controller.dirty
    window.sessions.confirm_close = True
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Cancel)
    assert window.close() is False
    assert window.controller.dirty and not window.controller._thread.isFinished()
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Discard)
    assert window.close() is True


def test_unsaved_runs_ask_before_a_file_replaces_them(qtbot, window, tmp_path, monkeypatch):
    _load_and_run(qtbot, window, tokens=2)
    ctl = window.controller
    path = tmp_path / "other.llmlens"
    _save(qtbot, ctl, path)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        ctl.request_run("Hi", True, GREEDY, 2)  # a run made after the save: unsaved
    assert ctl.dirty
    window.sessions.confirm_close = True
    asked: list[str] = []

    def cancel(_parent, _title, text, *_a, **_k):
        asked.append(text)
        return QMessageBox.StandardButton.Cancel

    monkeypatch.setattr(QMessageBox, "question", cancel)
    window.sessions.open(str(path))
    qtbot.wait(200)
    assert ctl.recorded is None and ctl.prompt.text == "Hi"  # nothing replaced
    assert asked and "before opening" in asked[0]
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Discard)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        window.sessions.open(str(path))
    assert ctl.recorded is not None


def test_crash_recovery_is_offered_after_an_unclean_exit(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_LENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path / "config"))
    from llm_lens.desktop.window.main_window import MainWindow

    win = MainWindow()
    win.sessions.confirm_close = False
    qtbot.addWidget(win)
    assert win.sessions.start() is None  # first launch: nothing to recover
    (tmp_path / "cache" / "autosave.llmlens").write_bytes(b"x")
    # the process "crashes": the lock stays; the next launch finds both
    assert win.sessions.start() == str(tmp_path / "cache" / "autosave.llmlens")
    win.close()  # a clean exit forgets both
    assert not (tmp_path / "cache" / "session.lock").exists()
    assert not (tmp_path / "cache" / "autosave.llmlens").exists()


def _cancel_button(dialog):
    from PySide6.QtWidgets import QPushButton

    return dialog.findChild(QPushButton)


def test_save_shows_a_progress_bar_and_cancel_keeps_the_previous_file(qtbot, window, tmp_path):
    _load_and_run(qtbot, window, tokens=3)
    ctl, actions = window.controller, window.sessions
    path = tmp_path / "kept.llmlens"
    path.write_bytes(b"the previous file")
    with qtbot.waitSignal(ctl.sig_error, timeout=120_000) as blocker:
        actions.save_as(str(path))
        assert actions.progress is not None and actions.progress.isVisible()
        _cancel_button(actions.progress).click()  # the user presses Cancel at once
    assert "cancelled" in blocker.args[0]
    assert path.read_bytes() == b"the previous file"
    assert [p.name for p in tmp_path.iterdir() if "kept" in p.name] == ["kept.llmlens"]
    assert actions.progress is None  # closed
    seen: list[tuple[int, str]] = []  # the dialog after each progress report
    ctl.sessions.sig_save_progress.connect(
        lambda *_a: seen.append((actions.progress.value(), actions.progress.labelText()))
    )
    with _saved(qtbot, ctl, path) as blocker:
        actions.save_as(str(path))
    size = blocker.args[1]
    assert actions.progress is None and seen and seen[-1][0] == 1000
    assert [v for v, _ in seen] == sorted(v for v, _ in seen)
    assert all("≈" in text for _, text in seen)  # the size is said before any byte is written
    said = re.search(r"≈ ([0-9.]+) MB: logits", seen[-1][1])  # the size, in the body
    assert said and abs(float(said.group(1)) * 1e6 / size - 1) < 0.1
    assert len(load_session(path).runs[0].steps) == 3


def test_attributions_computed_before_saving_show_without_the_model(qtbot, window, tmp_path):
    _load_and_run(qtbot, window, tokens=3)
    ctl = window.controller
    live = _wait(qtbot, ctl, "explain", step=2, vs=None)
    path = tmp_path / "why.llmlens"
    _save(qtbot, ctl, path)

    fresh = _open_without_model(qtbot, path)
    other = fresh.controller
    assert other.model_info is None
    got = other.request_analysis("explain", step=2, vs=None)  # answered from the file
    assert got is not None and got.token_text == live.token_text
    assert np.array_equal(got.logits.heads, live.logits.heads)
    assert np.array_equal(got.inputs.values, live.inputs.values)
    assert np.array_equal(got.graph.weight, live.graph.weight)
    assert other.request_analysis("explain", step=1, vs=None) is None  # never computed
    fresh.close()
