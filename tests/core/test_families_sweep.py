"""The families sweep (``benchmarks/families_sweep.py``): its generic shrinking keeps one layer of
each kind and cuts every per-layer field with them, it sweeps decoder-only text types only, and
the README's table holds what it finds (a few rows re-run here; the whole sweep is ``make
bench``)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
RERUN = ("llama", "mamba2", "qwen3_next")  # plain, pure state-space, a DeltaNet hybrid


def _module(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def test_shrink_keeps_one_layer_of_each_kind_and_cuts_per_layer_fields() -> None:
    sc = _module("sweep_configs")
    cfg = dict(num_hidden_layers=5, hidden_size=4096, num_attention_heads=32,
               num_key_value_heads=1, vocab_size=100000, bos_token_id=99999,
               layer_types=["mamba", "mamba", "attention", "mamba", "attention"],
               mlp_only=[True, False, False, True, False],
               heads_per_layer=[1, 2, 3, 4, 5], num_attention_heads_per_layer=[32] * 5,
               per_layer_config={"02": {"head_dim": 512}, "04": {"head_dim": 512}},
               attn_config={"kv_n_heads": 8})  # fmt: skip
    small = sc.shrink(cfg, 64)
    assert small["num_hidden_layers"] == 2 and small["layer_types"] == ["mamba", "attention"]
    assert small["mlp_only"] == [True, False] and small["heads_per_layer"] == [1, 3]
    assert small["num_attention_heads_per_layer"] == [sc.HEADS] * 2
    assert small["per_layer_config"] == {"01": {"head_dim": 2 * sc.HEAD_DIM}}
    assert small["hidden_size"] == sc.HIDDEN and small["num_attention_heads"] == sc.HEADS
    assert small["num_key_value_heads"] == 1  # multi-query stays multi-query
    assert small["attn_config"] == {"kv_n_heads": sc.KV_HEADS}
    assert small["vocab_size"] == 64 and small["bos_token_id"] == 1


def test_the_sweep_takes_decoder_only_text_types() -> None:
    types = _module("sweep_configs").swept_types()
    assert {"llama", "gemma3_text", "mamba", "qwen3_next", "deepseek_v32"} <= set(types)
    assert not {"bart", "bert", "gemma3", "whisper", "roberta"} & set(types)


@pytest.mark.parametrize("name", RERUN)
def test_readme_rows_are_what_the_sweep_finds(tokenizer, name: str) -> None:
    sweep = _module("families_sweep")
    rows = sweep.readme_rows(sweep.README.read_text(encoding="utf-8"))
    (result,) = sweep.sweep([name], tokenizer, verbose=False)
    assert result.passed, result.reason
    assert rows[name] == result.row(), f"README row {name} is stale: run --write"


def test_the_readme_says_how_many_pass() -> None:
    sweep = _module("families_sweep")
    text = sweep.README.read_text(encoding="utf-8")
    block = text.split(sweep.START, 1)[1].split(sweep.END, 1)[0]
    rows = sweep.readme_rows(text).values()
    passed = sum("| pass |" in r for r in rows)
    counted = sum("| n/a |" not in r for r in rows)
    assert f"{passed} of {counted} families that transformers runs at this size pass" in block
