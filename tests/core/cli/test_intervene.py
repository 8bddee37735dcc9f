"""``llm-lens trace --intervene SPEC``: the run is changed and its JSON says how; a malformed
or impossible SPEC is one line naming the problem, exit 2, before anything is written."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from llm_lens.core.cli import main

PROMPT = "The capital of France is"


def _trace(tmp_path: Any, *args: str) -> dict[str, Any]:
    out = tmp_path / "trace.json"
    code = main(["trace", PROMPT, "--raw", "--greedy", "--max-new-tokens", "3", *args,
                 "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 0
    return dict(json.loads(out.read_text(encoding="utf-8")))


@pytest.mark.slow
def test_trace_records_and_applies_interventions(tmp_path: Any, loaded: Any) -> None:
    vec = tmp_path / "vec.npy"
    np.save(vec, np.random.default_rng(0).normal(size=576) * 4)
    plain = _trace(tmp_path)
    assert plain["interventions"] == []
    changed = _trace(
        tmp_path, "--intervene", "head:7.4=0", "--intervene", "mlp:12*0.5",
        "--intervene", f"resid:10@1-2+={vec}", "--intervene", "forget:1",
    )  # fmt: skip
    specs = [row["spec"] for row in changed["interventions"]]
    assert specs == ["head:7.4=0", "mlp:12*0.5", "resid:10@1,2+=<576 numbers>", "forget:1"]
    assert changed["interventions"][0] == {
        "spec": "head:7.4=0", "kind": "head", "layer": 7, "head": 4, "op": "scale", "factor": 0.0
    }  # fmt: skip
    assert changed["steps"][0]["top"][0]["logit"] != plain["steps"][0]["top"][0]["logit"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("head:30.0=0", "no layer 30"),
        ("head:7.9=0", "no head 9"),
        ("mlp:2*nan", "finite"),
        ("expert:3.1=off", "has no experts"),
        ("resid:3+=short.npy", "the vector has 3 numbers"),
        ("bogus", "not a SPEC"),
    ],
)
def test_a_bad_spec_is_one_line_and_exit_2(
    tmp_path: Any, loaded: Any, capsys: Any, spec: str, words: str
) -> None:
    np.save(tmp_path / "short.npy", np.ones(3))
    out = tmp_path / "trace.json"
    spec = spec.replace("short.npy", str(tmp_path / "short.npy"))
    code = main(["trace", PROMPT, "--intervene", spec, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and words in err and err.startswith("llm-lens trace: error:")


def test_a_malformed_spec_fails_before_the_model_loads(tmp_path: Any, capsys: Any) -> None:
    code = main(["trace", PROMPT, "--intervene", "head:1.1*inf", "--model", "/no/such/model"])
    err = capsys.readouterr().err
    assert code == 2 and "finite" in err and "/no/such/model" not in err


def test_branch_refuses_interventions(capsys: Any) -> None:
    code = main(["trace", PROMPT, "--intervene", "forget:1", "--branch", "1:x"])
    assert code == 2 and "--branch and --intervene" in capsys.readouterr().err


@pytest.mark.slow
def test_explain_reads_the_model_the_interventions_made(tmp_path: Any, loaded: Any) -> None:
    """The attribution's logit is the intervened run's own, and the head turned off wrote 0."""
    out = tmp_path / "why.json"
    args = ["--raw", "--greedy", "--step", "1", "--intervene", "head:7.4=0",
            "--intervene", "forget:1", "--json", "--out", str(out), "--quiet"]  # fmt: skip
    assert main(["explain", PROMPT, *args]) == 0
    why = json.loads(out.read_text(encoding="utf-8"))
    trace = _trace(tmp_path, "--intervene", "head:7.4=0", "--intervene", "forget:1")
    step = trace["steps"][1]
    assert why["logit"] == pytest.approx(step["top"][0]["logit"], abs=1e-3)
    head = [c for c in why["components"] if c["kind"] == "head" and c["layer"] == 7]
    assert head and head[4]["head"] == 4 and head[4]["value"] == 0.0
    assert [r["spec"] for r in why["interventions"]] == ["head:7.4=0", "forget:1"]
