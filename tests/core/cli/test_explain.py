"""The headless ``llm-lens explain`` command: the documented JSON, and one-line errors."""

from __future__ import annotations

import json

import pytest

from llm_lens.core.cli import main

PROMPT = "Explain transformers like I am 12"


def test_explain_writes_the_documented_json(tmp_path, loaded):
    out = tmp_path / "why.json"
    args = [PROMPT, "--greedy", "--step", "2", "--vs", " the", "--json", "--out", str(out)]
    assert main(["explain", *args, "--quiet"]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    trace = tmp_path / "trace.json"
    assert main(["trace", PROMPT, "--greedy", "--max-new-tokens", "3", "--out", str(trace),
                 "--quiet"]) == 0  # fmt: skip
    step = json.loads(trace.read_text(encoding="utf-8"))["steps"][2]
    assert (data["step"], data["token_id"], data["token"]) == (
        2, step["token_id"], step["token_text"]
    )  # fmt: skip
    assert data["vs"] == " the" and data["vs_id"] != data["token_id"]
    heads = [c for c in data["components"] if c["kind"] == "head"]
    mlps = [c for c in data["components"] if c["kind"] == "mlp"]
    assert len(heads) == 30 * 9 and len(mlps) == 30
    total = data["components"][0]["value"] + sum(c["value"] for c in heads + mlps)
    assert total == pytest.approx(data["sum"], rel=1e-5)
    assert abs(data["residual"]) <= 1e-4 * max(1.0, abs(data["logit"]))
    tokens = data["input_attribution"]
    assert tokens[-1]["index"] == step["position"] and len(tokens) == step["position"] + 1
    g = data["graph"]
    assert g["threshold"] == 0.04 and g["edges"]
    ids = {n["id"] for n in g["nodes"]}
    assert all(e["source"] in ids and e["target"] in ids for e in g["edges"])
    assert {e["kind"] for e in g["edges"]} <= {"attn", "residual", "mlp"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["hi", "--step", "-1"], "--step"),
        (["hi", "--step", "0", "--threshold", "2"], "--threshold"),
        (["hi", "--greedy", "--step", "0", "--vs", "hello there friend"], "not one"),
    ],
)
def test_explain_errors_are_one_clear_line(args, needle, capsys, loaded):
    assert main(["explain", *args, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("llm-lens explain: error:")
    assert needle in err[0]


def test_the_summary_says_what_a_post_norm_model_holds(loaded):
    """Gemma 2: the printed answer names the post-attention norms held at their scale and the
    final soft-cap's share of the residual."""
    from llm_lens.core.cli.explain import summary
    from llm_lens.core.explain.attribution import explain, explanation_dict
    from tests.core.explain.test_explain import gemma2_step

    engine, step = gemma2_step(loaded)
    data = json.loads(json.dumps(explanation_dict(explain(engine, step))))
    assert data["post_norm"] is True and data["after_unembed"] != 0
    text = summary(data)
    assert f"final soft-cap {data['after_unembed']:+.3f}" in text
    assert "post-attention norm is held" in text
