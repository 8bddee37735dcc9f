"""``llm-lens trace --engine ndif``: the bundled model through remote="local" writes the local
trace's tokens and lens; a Hub id without a key, or a bad option, is one line."""

from __future__ import annotations

import json

import pytest

from llm_lens.core.cli import main
from llm_lens.core.engines.ndif.status import KEY_ENV, NO_KEY


def test_trace_through_the_local_simulation_equals_the_local_trace(
    tmp_path, monkeypatch, greedy_run, engine
):
    monkeypatch.setenv(KEY_ENV, "sentinel-key-5150")
    out = tmp_path / "trace.json"
    args = ["Explain transformers like I am 12", "--greedy", "--max-new-tokens", "8", "--quiet"]
    assert main(["trace", *args, "--engine", "ndif", "--open-head", "2.1", "--out", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [s["token_id"] for s in data["steps"]] == greedy_run.generated_ids
    assert [s["prob"] for s in data["steps"]] == [s.prob for s in greedy_run.steps]
    from llm_lens.core.layers import logit_lens

    lens = logit_lens(engine, greedy_run.steps[0], k=1)
    assert [row["top_id"] for row in data["steps"][0]["logit_lens"]] == list(lens.top_ids[:, 0])
    assert data["engine"]["name"] == "ndif" and data["engine"]["backend"] == "local simulation"
    assert 0 < data["engine"]["payload_bytes_per_step"] < 8_000
    assert data["engine"]["job_states"] == ["RECEIVED", "RUNNING", "COMPLETED"]
    assert data["engine"]["capture"]["heads"] == [[2, 1]]
    assert "sentinel-key-5150" not in out.read_text(encoding="utf-8")


def test_engine_choice_joins_another_engine_s_option():
    """Where another engine's options defined --engine, ndif joins its choices."""
    from llm_lens.core.cli import ndif
    from llm_lens.core.cli.args import Parser

    p = Parser()
    p.add_argument("--engine", choices=("local", "openai"), default="local", help="where")
    ndif.add_arguments(p)
    assert p.parse_args(["--engine", "ndif"]).engine == "ndif"
    assert p.parse_args(["--engine", "openai"]).engine == "openai"


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (["--model", "org/model-on-ndif"], NO_KEY),
        (["--open-head", "3x"], "--open-head wants LAYER.HEAD"),
        (["--session", "x.llmlens"], "--session is not supported with --engine ndif"),
    ],
)
def test_mistakes_are_one_line(monkeypatch, capsys, tmp_path, extra, line):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setitem(__import__("sys").modules, "keyring", None)
    monkeypatch.chdir(tmp_path)
    assert main(["trace", "hi", "--engine", "ndif", "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and line in err
    assert not list(tmp_path.iterdir())  # nothing written
