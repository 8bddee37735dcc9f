"""File → Open server… against a test double of an OpenAI-compatible server on 127.0.0.1: the
dialog lists the server's models and saves the key's variable name (never a key); the model
opened through the controller method the dialog calls generates; the Tokens pane shows the
server's tokens, the Attention pane says in its one line why it shows nothing; a stream cut
mid-run is one line in the status bar and the token received stays shown."""

from __future__ import annotations

import pytest

from llm_lens.core.engines.openai.engine import MISSING
from llm_lens.core.engines.openai.live import ServerSpec
from llm_lens.core.sampling import GREEDY
from tests.core.engines.openai.fake_server import Fake, serving


@pytest.fixture
def window(bare_window):
    return bare_window


def open_and_run(qtbot, win, url: str) -> None:
    ctl = win.controller
    with qtbot.waitSignal(ctl.sig_model_loaded, timeout=20_000):
        ctl.request_open_server(ServerSpec(url))  # what the dialog's Open calls
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=20_000):
        ctl.request_run("Hi", True, GREEDY, 8)
    qtbot.waitUntil(lambda: not win.panes["Tokens"].laying_out, timeout=5_000)
    qtbot.wait(200)  # the panes' scheduled renders


def chips(win) -> list[str]:
    return [c.label for c in win.panes["Tokens"].model_view.chips]


def test_a_served_run_in_the_window(qtbot, window):
    with serving(Fake()) as url:
        open_and_run(qtbot, window, url)
    ctl = window.controller
    assert [s.token.text for s in ctl.steps] == ["Hello", " world"]  # the server's reply
    assert chips(window)[-2:] == ["Hello", "·world"] or chips(window)[-2:] == ["Hello", " world"]
    attention = next(p for p in window.panes.values() if p.capability == "attention")
    attention.render_and_paint()
    assert attention.empty_note.isVisibleTo(attention)
    assert attention.empty_note.text() == MISSING["attention"]
    assert attention.empty_note.text().startswith("this server reports no attention")
    assert window.panes["Tokens"].missing_line() is None
    sampling, positions = window.panes["Sampling"], window.panes["Positions"]
    sampling.render_and_paint()  # its note: the server's remedy, in the engine's words
    assert sampling.note.text() == (
        f"Approximate: this run brought back {len(ctl.steps[-1].top_ids)} alternatives, not "
        f"the whole distribution. {MISSING['distribution'][:1].upper()}"
        f"{MISSING['distribution'][1:]}."
    )
    assert "start vLLM with --max-logprobs -1" in sampling.note.text()
    positions.render_and_paint()
    assert positions.empty_note.text() == MISSING["residual"]
    assert positions.summary.text() == ""  # no stale "reading the model's positions…"


def test_a_stream_cut_mid_run_keeps_the_token_received(qtbot, window):
    with serving(Fake("cut")) as url:
        open_and_run(qtbot, window, url)
    line = window.statusBar().currentMessage()
    assert "closed the stream" in line and "\n" not in line and "1 tokens received" in line
    assert [s.token.text for s in window.controller.steps] == ["Hello"]
    assert chips(window)[-1] == "Hello"


def test_the_dialog_lists_models_and_saves_no_key(qtbot, tmp_path, monkeypatch):
    from PySide6.QtCore import QSettings

    from llm_lens.desktop.window.server_dialog import KEYS, ServerDialog

    monkeypatch.setenv("LENS_DIALOG_KEY", "sk-dialog-secret")
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    dialog = ServerDialog(settings)
    qtbot.addWidget(dialog)
    with serving(Fake(key="sk-dialog-secret")) as url:
        dialog.url.setText(url)
        dialog.key_env.setText("LENS_DIALOG_KEY")
        dialog.list_models()
        qtbot.waitUntil(lambda: dialog.model.count() == 1, timeout=10_000)
    assert dialog.model.currentText() == "fake-model"
    dialog.accept()
    settings.sync()
    assert settings.value(KEYS["key_env"]) == "LENS_DIALOG_KEY"
    assert "sk-dialog-secret" not in (tmp_path / "s.ini").read_text()
    dialog.url.setText("ftp://nowhere")
    dialog.accept()
    assert "must start with http://" in dialog.status.text()


def test_a_served_run_saved_from_the_window_reopens_without_the_server(qtbot, window, tmp_path):
    with serving(Fake()) as url:
        open_and_run(qtbot, window, url)
    ctl, path = window.controller, str(tmp_path / "served.llmlens")
    mine = lambda saved, _size: saved == path  # noqa: E731  # not the run end's autosave
    with qtbot.waitSignal(ctl.sig_saved, timeout=20_000, check_params_cb=mine):
        ctl.sessions.request_save(path)
    with qtbot.waitSignal(ctl.sig_session_changed, timeout=20_000):
        window.sessions.open(path)  # the server is gone: the window's open-session path
    qtbot.wait(200)
    assert ctl.session.engine["name"] == "openai" and ctl.session.served
    assert [s.token.text for s in ctl.steps] == ["Hello", " world"]
    assert [s.logprob for s in ctl.steps] == [-0.1, -0.5]
    assert ctl.why_not("attention") == MISSING["attention"] and ctl.why_not("tokens") is None


def test_compare_on_a_server_is_one_line(qtbot, window):
    with serving(Fake()) as url:
        open_and_run(qtbot, window, url)
    compare = window.controller.compare
    with qtbot.waitSignal(compare.sig_error, timeout=5_000) as said:
        compare.request_beam("Hi", True, 2, 4)
    kind, line = said.args
    assert kind == "beam" and "a server keeps no cache to fork" in line and "\n" not in line
