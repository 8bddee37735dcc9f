"""A served run in the window against llama.cpp's own server on the bundled GGUF: File → Export
run as JSON trace writes it with its ``engine`` record (live, and reopened from its session
without the server), and a tokens-only run (no log-probabilities asked, none sent) draws its
tokens and timing, says in one line why the probability panes are empty, and saves."""

from __future__ import annotations

import json
import math

import pytest

from llm_lens.core.engines.openai.engine import NO_LOGPROBS
from llm_lens.core.engines.openai.live import ServerSpec
from llm_lens.core.sampling import GREEDY
from tests.core.engines.openai.conftest import llama_server  # noqa: F401 (the fixture)

TOKENS = 6


@pytest.fixture
def window(bare_window):
    return bare_window


def open_and_run(qtbot, win, spec: ServerSpec) -> None:
    ctl = win.controller
    with qtbot.waitSignal(ctl.sig_model_loaded, timeout=30_000):
        ctl.request_open_server(spec)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=30_000):
        ctl.request_run("Hi", True, GREEDY, TOKENS)
    qtbot.waitUntil(lambda: not win.panes["Tokens"].laying_out, timeout=5_000)
    qtbot.wait(200)  # the panes' scheduled renders


def export(qtbot, ctl, path) -> dict:
    with qtbot.waitSignal(ctl.sig_saved, timeout=20_000):
        ctl.sessions.request_export("trace", str(path))
    return json.loads(path.read_text())


def test_a_served_run_exports_its_trace_with_the_engine(qtbot, window, llama_server, tmp_path):  # noqa: F811
    open_and_run(qtbot, window, ServerSpec(llama_server, top_logprobs=3))
    ctl = window.controller
    data = export(qtbot, ctl, tmp_path / "served.json")
    assert [s["token_text"] for s in data["steps"]] == [s.token.text for s in ctl.steps]
    assert [s["logprob"] for s in data["steps"]] == [s.logprob for s in ctl.steps]
    assert all(s["token_id"] >= 0 for s in data["steps"])  # the server's tokenizer's ids
    assert all(s["logit_lens"] == [] and s["approximate"] for s in data["steps"])
    engine = data["engine"]
    assert engine["name"] == "openai" and engine["url"] == llama_server
    assert engine["reported"]["logprobs"] is True and engine["request"]["top_logprobs"] == 3
    assert engine["reported"]["token_ids_from"] == "tokenize"
    assert "attention" in engine["provides"]["missing"]


def test_a_tokens_only_run_in_the_window(qtbot, window, llama_server, tmp_path):  # noqa: F811
    open_and_run(qtbot, window, ServerSpec(llama_server, logprobs=False))
    ctl = window.controller
    assert len(ctl.steps) == TOKENS and all(math.isnan(s.prob) for s in ctl.steps)
    for name in ("Logits", "Sampling"):
        pane = window.panes[name]
        pane.render_and_paint()
        assert pane.empty_note.isVisibleTo(pane) and pane.empty_note.text() == NO_LOGPROBS
    for name in ("Tokens", "Timing"):
        assert window.panes[name].missing_line() is None
    data = export(qtbot, ctl, tmp_path / "tokens.json")
    assert all(s["prob"] is None for s in data["steps"])
    assert data["engine"]["provides"]["missing"]["logprobs"] == NO_LOGPROBS
    path = str(tmp_path / "tokens.llmlens")
    with qtbot.waitSignal(ctl.sig_saved, timeout=20_000):
        ctl.sessions.request_save(path)
    texts = [s.token.text for s in ctl.steps]
    with qtbot.waitSignal(ctl.sig_session_changed, timeout=20_000):
        window.sessions.open(path)
    qtbot.wait(200)
    assert ctl.session.served and [s.token.text for s in ctl.steps] == texts
    assert ctl.why_not("logprobs") == NO_LOGPROBS and ctl.why_not("tokens") is None
    again = export(qtbot, ctl, tmp_path / "reopened.json")  # from the file: no server asked
    assert [s["token_text"] for s in again["steps"]] == texts
    assert again["engine"]["url"] == llama_server
    assert again["engine"]["provides"]["missing"]["alternatives"] == NO_LOGPROBS
