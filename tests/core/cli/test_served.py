"""``llm-lens trace --engine openai`` against a test double of a server: the trace written with
its engine record, and each failure one line with its exit status, a run stopped mid-stream
keeping every token received."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from llm_lens.core.cli.trace import main
from tests.core.engines.openai.conftest import llama_server  # noqa: F401 (the fixture)
from tests.core.engines.openai.fake_server import Fake, serving
from tests.core.engines.openai.llama_server import gguf_ids


def trace(url: str, tmp_path, *more: str) -> tuple[int, dict | None]:
    out = tmp_path / "t.json"
    argv = ["Hi", "--engine", "openai", "--base-url", url, "--greedy", "--quiet", "--out", str(out)]
    status = main([*argv, *more])
    return status, json.loads(out.read_text()) if out.exists() else None


def test_a_served_trace(tmp_path):
    with serving(Fake()) as url:
        status, data = trace(url, tmp_path)
    assert status == 0
    assert [s["token_text"] for s in data["steps"]] == ["Hello", " world"]
    assert data["engine"]["name"] == "openai" and data["engine"]["model"] == "fake-model"
    assert data["engine"]["reported"]["cached_tokens"] == 4
    assert "attention" in data["engine"]["provides"]["missing"]
    assert data["steps"][0]["logit_lens"] == [] and "stop_error" not in data


def test_a_stream_cut_mid_run_keeps_its_tokens(tmp_path, capsys):
    with serving(Fake("cut")) as url:
        status, data = trace(url, tmp_path)
    err = capsys.readouterr().err.strip()
    assert status == 1 and "\n" not in err and "closed the stream" in err
    assert data["finish_reason"] == "error" and "closed the stream" in data["stop_error"]
    assert [s["token_text"] for s in data["steps"]] == ["Hello"]


@pytest.mark.parametrize(
    ("fake", "extra", "line"),
    [
        (Fake("401"), (), "refused the request (401)"),
        (Fake("redirect"), (), "redirects (307) to http://elsewhere.invalid/v1/chat/completions"),
        (Fake("nostream"), (), "did not stream (stream=True); it sent a reply of type"),
        (Fake("400"), (), "answered 400 Bad Request: the prompt is longer than the context"),
        (Fake(), ("--model", "other"), "does not serve 'other'"),
        (Fake(), ("--api-key-env", "LENS_NOT_SET"), "LENS_NOT_SET, which is not set"),
        (Fake(), ("--intervene", "attn:0=0"), "--intervene changes the model"),
    ],
)
def test_each_failure_is_one_line(tmp_path, capsys, fake, extra, line):
    with serving(fake) as url:
        status, data = trace(url, tmp_path, *extra)
    err = capsys.readouterr().err.strip()
    assert status == 2 and data is None
    assert err.count("\n") == 0 and line in err and "Traceback" not in err


def test_a_wrong_url_is_one_line(tmp_path, capsys):
    status, data = trace("http://127.0.0.1:9/v1", tmp_path, "--timeout", "2")
    err = capsys.readouterr().err.strip()
    assert status == 2 and data is None and "cannot reach http://127.0.0.1:9/v1" in err


def test_base_url_needs_the_openai_engine(tmp_path, capsys):
    assert main(["Hi", "--base-url", "http://x/v1"]) == 2
    assert "--base-url needs --engine openai" in capsys.readouterr().err


def served_session(tmp_path, fake: Fake | None = None) -> tuple[int, dict | None, object]:
    """A served trace with --session: (status, trace, the session's path)."""
    path = tmp_path / "served.llmlens"
    with serving(fake or Fake()) as url:
        status, data = trace(url, tmp_path, "--session", str(path))
    return status, data, path


def test_a_served_session_reopens_without_the_server(tmp_path, capsys):
    from llm_lens.core.cli.inspect import main as inspect
    from llm_lens.core.sessions.read import load_session

    status, data, path = served_session(tmp_path)
    assert status == 0
    session = load_session(path)  # the server is gone: the file holds everything
    (run,) = session.runs
    assert session.served and session.engine["name"] == "openai"
    assert session.engine["model"] == "fake-model" and session.engine["url"].startswith("http")
    assert [s.token.text for s in run.steps] == [s["token_text"] for s in data["steps"]]
    assert [s.token.id for s in run.steps] == [-1, -1]  # the fake names tokens by text
    assert [s.logprob for s in run.steps] == [s["logprob"] for s in data["steps"]]
    assert run.steps[1].top_texts == (" world", " there", "!")
    assert np.allclose(run.steps[1].top_logits, [-0.5, -1.2, -3.0])
    assert all(s.approximate and s.logits.size == 0 for s in run.steps)
    capsys.readouterr()
    assert inspect([str(path)]) == 0
    shown = capsys.readouterr().out
    assert "engine    openai: fake-model at http://127.0.0.1:" in shown and "Hello world" in shown


def test_no_key_enters_a_served_session(tmp_path, monkeypatch):
    monkeypatch.setenv("LENS_TEST_KEY", "sk-secret-123")
    path = tmp_path / "k.llmlens"
    with serving(Fake(key="sk-secret-123")) as url:
        status, _ = trace(url, tmp_path, "--api-key-env", "LENS_TEST_KEY", "--session", str(path))
    assert status == 0
    with zipfile.ZipFile(path) as zf:
        assert all(b"sk-secret-123" not in zf.read(n) for n in zf.namelist())


def test_a_served_run_cut_mid_stream_saves_its_tokens(tmp_path):
    from llm_lens.core.sessions.read import load_session

    status, _, path = served_session(tmp_path, Fake("cut"))
    (run,) = load_session(path).runs
    assert status == 1 and [s.token.text for s in run.steps] == ["Hello"]
    assert run.finish_reason == "error" and "closed the stream" in run.extras_json["stop_error"]


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (lambda m: m.pop("engine"), "engine is missing"),
        (lambda m: m["engine"].update(url="http://u:pw@h/v1"), "must not hold credentials"),
        (lambda m: m["model"].update(num_layers=-1), "model.num_layers must be between 0"),
        (lambda m: m["runs"][0]["steps"][0]["token"].update(id=-2), "token.id must be between -1"),
        (lambda m: m["runs"][0]["steps"][0].update(prob=2.0), "prob must be a finite number"),
        (lambda m: m["runs"][0]["steps"][0].update(approximate="yes"), "must be true or false"),
    ],
)
def test_a_hostile_served_manifest_is_still_checked(tmp_path, change, line):
    from llm_lens.core.sessions.format import SessionError
    from llm_lens.core.sessions.read import load_session

    _, _, path = served_session(tmp_path)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    change(manifest)
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    with pytest.raises(SessionError, match="invalid") as caught:
        load_session(path)
    assert line in str(caught.value) and "\n" not in str(caught.value)


def test_a_served_chat_run_is_not_branched(tmp_path, capsys):
    with serving(Fake()) as url:
        status, data = trace(url, tmp_path, "--branch", "0:x")
    err = capsys.readouterr().err.strip()
    assert status == 2 and data is None and "\n" not in err
    assert "--branch with --engine openai needs --raw" in err


def test_served_branches_are_the_servers_replies_to_the_text_so_far(
    tmp_path,
    llama_server,  # noqa: F811
):
    """``trace --engine openai --raw --branch``: each branch keeps the run's steps before its
    step, forces the token there (given as text or as an id), and goes on with the server's
    own greedy reply to that text so far; every id is the GGUF tokenizer's; the session keeps
    the run and its branches, each with its branch point."""
    from llm_lens.core.engines.openai import Endpoint, OpenAIEngine
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY
    from llm_lens.core.sessions.read import load_session

    text, session = "The capital of France is", tmp_path / "tree.lens"
    [[berlin]] = gguf_ids([" Berlin"])
    out = tmp_path / "t.json"
    argv = [text, "--engine", "openai", "--base-url", llama_server, "--raw", "--greedy", "--quiet",
            "--max-new-tokens", "4", "--out", str(out), "--session", str(session),
            "--branch", "1: London", "--branch", f"2:{berlin}"]  # fmt: skip
    assert main(argv) == 0
    data = json.loads(out.read_text())
    served = OpenAIEngine(Endpoint(llama_server), None)
    root = data["steps"]
    for (step, forced), branch in zip([(1, " London"), (2, " Berlin")], data["branches"],
                                      strict=True):  # fmt: skip
        steps = branch["steps"]
        assert [s["token_text"] for s in steps[:step]] == [s["token_text"] for s in root[:step]]
        assert steps[step]["token_text"] == forced
        so_far = text + "".join(s["token_text"] for s in steps[: step + 1])
        reply = served.start(served.tokenize(so_far, chat=False), GREEDY, RunConfig(4), None)
        assert [s["token_text"] for s in steps[step + 1 :]] == [s.token.text for s in reply]
        ids = [s["token_id"] for s in steps]
        assert ids == [one for [one] in gguf_ids([s["token_text"] for s in steps])]
    assert data["branches"][1]["steps"][2]["token_id"] == berlin
    saved = load_session(session)
    assert [r.parent for r in saved.runs] == [None, (saved.runs[0].run_id, 1),
                                              (saved.runs[0].run_id, 2)]  # fmt: skip
    assert [s.token.text for s in saved.runs[1].steps] == [
        s["token_text"] for s in data["branches"][0]["steps"]
    ]
