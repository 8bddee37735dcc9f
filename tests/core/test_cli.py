"""The headless ``llm-lens trace`` command: schema, numbers, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

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
        (["hi", "--max-new-tokens", "0"], "max new tokens"),
        (["hi", "--device", "cuda"], "CUDA"),
    ],
)
def test_trace_errors_are_one_clear_line(args, needle, capsys):
    assert main(["trace", *args, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("llm-lens trace: error:")
    assert needle in err[0]


def test_entry_point_dispatches_kv_without_qt(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 30,
                "num_attention_heads": 9,
                "num_key_value_heads": 3,
                "hidden_size": 576,
                "max_position_embeddings": 8192,
            }
        )
    )
    code = (
        "import sys; from llm_lens.desktop.cli import main; "
        "rc = main(['kv', '--config', sys.argv[1], "
        "'--tokens', '10', '--dtype', 'float32', '--json']); "
        "assert 'PySide6' not in sys.modules; sys.exit(rc)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(config)], capture_output=True, text=True, check=True
    )
    data = json.loads(out.stdout)
    assert data["bytes_per_token"] == 46080 and data["total_bytes"] == 460800
    assert data["mha_bytes_per_token"] == 138240


def test_trace_branches_and_saves_the_tree(tmp_path, loaded):
    """``--branch`` grows branches with the same history the window uses; ``--session`` keeps
    the whole tree, each branch's parent pointing at the step it left."""
    from llm_lens.core.sessions.read import load_session

    session = tmp_path / "tree.llmlens"
    prompt = "Explain transformers like I am 12"
    greedy = ("--greedy", "--max-new-tokens", "4")
    plain = _trace(tmp_path, prompt, *greedy)
    forced = plain["steps"][2]["top"][1]["id"]  # the runner-up at step 2
    data = _trace(tmp_path, prompt, *greedy, "--branch", f"2:{forced}", "--session", str(session))
    (branch,) = data["branches"]
    assert [s["token_id"] for s in branch["steps"][:2]] == [
        s["token_id"] for s in plain["steps"][:2]
    ]
    assert branch["steps"][2]["token_id"] == forced and len(branch["steps"]) == 2 + 1 + 4
    runs = load_session(session).runs
    assert len(runs) == 2 and runs[0].parent is None and runs[1].parent == (runs[0].run_id, 2)
    assert [s.token.id for s in runs[1].steps] == [s["token_id"] for s in branch["steps"]]
    assert main(["trace", prompt, *greedy, "--quiet", "--branch", "9:x"]) == 2  # no step 9
