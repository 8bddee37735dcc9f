"""The window side of the hostile-input catalogue: a bug on the model thread or in a slot is one
line shown inline plus a log; the special-token toggle reaches the run; a model folder asking for
custom code fails the load with its message instead of hanging on a question nobody sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llm_lens.core.records import PromptTokens, TokenInfo


@pytest.fixture
def logs(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_LENS_LOG_DIR", str(tmp_path / "logs"))
    return tmp_path / "logs"


class _BrokenEngine:
    class info:  # noqa: N801 (stands in for ModelInfo)
        name = "broken-model"

    def tokenize(self, *_args, **_kwargs):
        raise ZeroDivisionError("a bug in tokenize")


def test_a_bug_on_the_model_thread_is_one_line_and_a_log(logs, capsys):
    from llm_lens.core.runs.workbench import RunRequest
    from llm_lens.desktop.model_thread.worker import Worker

    worker = Worker()
    errors = []
    worker.sig_error.connect(lambda where, message: errors.append((where, message)))
    worker.workbench.engine = _BrokenEngine()
    worker.run(RunRequest(1, "hi", True, None, None, False))
    ((where, message),) = errors
    assert where == "run"
    assert message.startswith("unexpected error while running on broken-model")
    assert "ZeroDivisionError: a bug in tokenize" in message
    (log,) = logs.iterdir()
    assert str(log) in message and "in tokenize" in log.read_text()
    assert "Traceback" not in capsys.readouterr().err


def test_a_bug_while_loading_is_one_line(logs, monkeypatch):
    from llm_lens.core import loading
    from llm_lens.desktop.model_thread.worker import Worker

    def broken(*_args, **_kwargs):
        raise KeyError("rope_scaling")

    monkeypatch.setattr(loading, "load_model", broken)
    worker = Worker()
    errors = []
    worker.sig_error.connect(lambda where, message: errors.append((where, message)))
    worker.load("some/model", "cpu", "auto")
    assert errors[0][0] == "load"
    assert errors[0][1].startswith("unexpected error while loading the model some/model: KeyError")


def test_a_bug_in_a_gui_slot_shows_inline(logs, capsys):
    from llm_lens.desktop.startup.app import install_excepthook

    class Panel:
        shown: list[str] = []

        def show_error(self, line):
            self.shown.append(line)

    class Window:
        prompt_panel = Panel()

    install_excepthook(Window())
    try:
        try:
            raise ValueError("slot bug")
        except ValueError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
    finally:
        sys.excepthook = sys.__excepthook__
    (line,) = Window.prompt_panel.shown
    assert line.startswith("unexpected error while handling a window event: ValueError: slot bug")
    assert "Traceback" not in capsys.readouterr().err
    assert "slot bug" in next(logs.iterdir()).read_text()


def test_the_toggle_is_off_by_default_and_reaches_the_run(qtbot, monkeypatch):
    from llm_lens.desktop.state.controller import Controller
    from llm_lens.desktop.window.prompt_panel import PromptPanel

    ctl = Controller()
    try:
        panel = PromptPanel(ctl, [{"title": "t", "text": "<|im_start|>x"}])
        qtbot.addWidget(panel)
        calls = []
        monkeypatch.setattr(ctl, "request_run", lambda *a, **k: calls.append(k))
        assert panel.special_box.text() == "Parse special tokens in my text"
        assert not panel.special_box.isChecked()
        panel.run()
        panel.special_box.setChecked(True)
        panel.run()
        assert [c["parse_special"] for c in calls] == [False, True]
    finally:
        ctl.shutdown()


def test_tokens_pane_marks_who_wrote_each_special_token():
    from llm_lens.desktop.panes.tokens import special_mode_text, token_chip

    template = TokenInfo(1, "<|im_start|>", b"<|im_start|>", True, 0, 12)
    user = TokenInfo(1, "<|im_start|>", b"<|im_start|>", True, 20, 32, from_user=True)
    chip_t, chip_u = token_chip(template, "prompt token 0"), token_chip(user, "prompt token 5")
    assert not chip_t.from_user and "chat template" in chip_t.tooltip
    assert chip_u.from_user and "from YOUR text" in chip_u.tooltip
    assert "added by the tokenizer" in token_chip(template, "p", chat=False).tooltip
    literal = PromptTokens("x", "x", False, (template,))
    parsed = PromptTokens("x", "x", False, (template, user), parse_special=True)
    assert special_mode_text(literal) == "special-token text you typed is read as plain text"
    assert special_mode_text(parsed) == "special tokens parsed from your text: 1"


def test_the_window_refuses_a_custom_code_folder_without_hanging(tmp_path):
    folder, marker = tmp_path / "evil", tmp_path / "MARKER"
    folder.mkdir()
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    config = {"model_type": "llama", "auto_map": {"AutoConfig": "evil.EvilConfig"}}
    (folder / "config.json").write_text(json.dumps(config))
    env = dict(os.environ, LLM_LENS_CONFIG_DIR=str(tmp_path / "cfg"), QT_QPA_PLATFORM="offscreen")
    env["LLM_LENS_LOG_DIR"] = str(tmp_path / "logs")
    cmd = [sys.executable, "-m", "llm_lens.desktop", "--selftest", "--model", str(folder)]
    cmd += ["--window-size", "800x600"]
    result = subprocess.run(cmd, input=b"y\n", capture_output=True, env=env, timeout=180)
    err = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 1, err  # the self-test failed cleanly: no signal, no hang
    assert "needs custom code" in err and "Traceback" not in err
    assert not marker.exists()
