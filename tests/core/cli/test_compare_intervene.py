"""``llm-lens compare --intervene SPEC``: every column runs under the changes (its tokens equal
``llm-lens trace --intervene`` with the same settings), the JSON records them, and a bad SPEC is
one line, exit 2, before anything is written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_lens.core.cli import main

PROMPT = "The capital of France is"
SPECS = ("--intervene", "head:7.4=0", "--intervene", "mlp:12*0.5")


def _json(tmp_path: Any, name: str, argv: list[str]) -> dict[str, Any]:
    out = tmp_path / name
    assert main([*argv, "--raw", "--max-new-tokens", "4", "--out", str(out), "--quiet"]) == 0
    return dict(json.loads(out.read_text(encoding="utf-8")))


def _ids(trace: dict[str, Any]) -> list[int]:
    return [step["token_id"] for step in trace["steps"]]


@pytest.mark.slow
def test_compare_columns_run_under_the_interventions(tmp_path: Any, loaded: Any) -> None:
    configs = ["--config", "greedy", "--config", "temperature=0.8,seed=3"]
    plain = _json(tmp_path, "plain.json", ["compare", PROMPT, *configs])
    changed = _json(tmp_path, "changed.json", ["compare", PROMPT, *configs, *SPECS])
    assert plain["interventions"] == [] and all(t["interventions"] == [] for t in plain["traces"])
    specs = ["head:7.4=0", "mlp:12*0.5"]
    assert [row["spec"] for row in changed["interventions"]] == specs
    assert all([r["spec"] for r in t["interventions"]] == specs for t in changed["traces"])
    traced = _json(tmp_path, "greedy.json", ["trace", PROMPT, "--greedy", *SPECS])
    sampled = ["trace", PROMPT, "--temperature", "0.8", "--top-p", "1", "--seed", "3", *SPECS]
    hot = _json(tmp_path, "hot.json", sampled)
    assert _ids(changed["traces"][0]) == _ids(traced)
    assert _ids(changed["traces"][1]) == _ids(hot)
    first = changed["traces"][0]["steps"][0]["top"][0]["logit"]
    assert first == pytest.approx(traced["steps"][0]["top"][0]["logit"], abs=1e-4)
    assert first != plain["traces"][0]["steps"][0]["top"][0]["logit"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "words"),
    [("head:30.0=0", "no layer 30"), ("expert:3.1=off", "has no experts"), ("bogus", "not a SPEC")],
)
def test_a_bad_spec_is_one_line_and_exit_2(
    tmp_path: Any, loaded: Any, capsys: Any, spec: str, words: str
) -> None:
    out = tmp_path / "compare.json"
    argv = ["compare", PROMPT, "--config", "greedy", "--config", "wild", "--intervene", spec]
    code = main([*argv, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and words in err and err.startswith("llm-lens compare: error:")


def test_a_malformed_spec_fails_before_the_model_loads(capsys: Any) -> None:
    argv = ["compare", PROMPT, "--config", "greedy", "--config", "wild", "--model", "/no/such"]
    code = main([*argv, "--intervene", "mlp:1*nan"])
    err = capsys.readouterr().err
    assert code == 2 and "finite" in err and "/no/such" not in err
