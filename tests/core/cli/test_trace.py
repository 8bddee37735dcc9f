"""The headless ``llm-lens trace`` command: schema, numbers, and one-line errors."""

from __future__ import annotations

import json

import pytest

from llm_lens.core.cli import main


def _trace(tmp_path, *args):
    out = tmp_path / "trace.json"
    code = main(["trace", *args, "--out", str(out), "--quiet"])
    assert code == 0
    return json.loads(out.read_text(encoding="utf-8"))


def test_trace_writes_the_documented_schema(tmp_path, loaded):
    data = _trace(
        tmp_path, "Explain transformers like I am 12", "--greedy", "--max-new-tokens", "4"
    )
    assert data["schema"] == "llm-lens-trace/1"
    model = data["model"]
    assert (model["num_layers"], model["num_heads"], model["num_kv_heads"]) == (30, 9, 3)
    assert (model["head_dim"], model["hidden_size"], model["vocab_size"]) == (64, 576, 49152)
    assert model["context_length"] == 8192 and model["dtype"] == "float32"
    assert len(data["prompt"]["token_ids"]) == len(data["prompt"]["tokens"])
    assert len(data["steps"]) == 4
    first = data["steps"][0]
    for key in (
        "token_id",
        "token_text",
        "prob",
        "logprob",
        "rank",
        "top",
        "entropy",
        "elapsed_ms",
        "kv_cache_bytes",
        "logit_lens",
    ):
        assert key in first
    assert first["rank"] == 0  # greedy picks the top token
    assert first["top"][0]["id"] == first["token_id"]
    probs = [t["prob"] for t in first["top"]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-5
    assert len(first["logit_lens"]) == 31
    assert first["logit_lens"][-1]["top_id"] == first["token_id"]
    tokens = len(data["prompt"]["token_ids"])
    assert first["kv_cache_bytes"] == 2 * 30 * 3 * 64 * 4 * tokens
    assert data["timing"]["ttft_ms"] > 0 and data["timing"]["tokens_per_s"] > 0
    assert data["output_text"] == "".join(s["token_text"] for s in data["steps"])


def test_trace_is_reproducible_with_a_seed(tmp_path, loaded):
    args = (
        "Write a word.",
        "--temperature",
        "1.0",
        "--top-p",
        "0.9",
        "--seed",
        "7",
        "--max-new-tokens",
        "6",
    )
    a = _trace(tmp_path, *args)
    b = _trace(tmp_path, *args)
    assert [s["token_id"] for s in a["steps"]] == [s["token_id"] for s in b["steps"]]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["", "--raw"], "empty"),
        (["hi", "--model", "/no/such/model"], "/no/such/model"),
        (["hi", "--temperature", "-1"], "temperature"),
        (["hi", "--top-p", "1.5"], "top-p"),
        (["hi", "--max-new-tokens", "0"], "--max-new-tokens: must be at least 1"),
        (["hi", "--device", "cuda"], "CUDA"),
    ],
)
def test_trace_errors_are_one_clear_line(args, needle, capsys):
    assert main(["trace", *args, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("llm-lens trace: error:")
    assert needle in err[0]
