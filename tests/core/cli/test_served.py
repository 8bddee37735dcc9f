"""``llm-lens trace --engine openai`` against a test double of a server: the trace written with
its engine record, and each failure one line with its exit status, a run stopped mid-stream
keeping every token received."""

from __future__ import annotations

import json

import pytest

from llm_lens.core.cli.trace import main
from tests.core.engines.openai.fake_server import Fake, serving


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
