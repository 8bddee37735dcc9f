"""DeepSeek-V4's cache as held: one tensor as key and value, in a sliding window, and beside it
each compressor's waiting tokens, compressed entries and overlap series. At every step the
measured bytes = every tensor the cache's layers hold (each storage once), = the formula from
the loaded model's modules, = ``llm-lens kv`` from the config alone.

The models are tiny seeded DeepSeek-V4s (``tests/stream_families.py``): its own, and one with
short compress rates and window so that every compressor closes windows and the window fills.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from llm_lens.core.kvcache import build_report, layout_from_config
from llm_lens.core.kvcache.compressed import compressors_bytes
from llm_lens.core.loading import LoadedModel, describe
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.families import seeded_model
from tests.stream_families import stream_config, stream_model

PROMPT = "The quick brown fox jumps over the lazy dog"
SHORT = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}
_models: dict[str, Any] = {}


def _short_config(name: str, vocab: int) -> Any:
    """The tiny DeepSeek-V4 with compress rates 4 and 8 and a 6-token window."""
    config = stream_config("deepseek_v4", vocab)
    config.compress_rates = dict(SHORT)
    config.sliding_window = 6
    return config


def _model(kind: str, tokenizer: Any) -> Any:
    if kind == "own":
        return stream_model("deepseek_v4", tokenizer)
    if kind == "bfloat16":  # the overlap's gate is float32 (its bias is) in a bfloat16 model
        if kind not in _models:  # built in bfloat16 as a load with that dtype builds it
            from transformers import AutoModelForCausalLM

            config = stream_config("deepseek_v4", len(tokenizer))
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(
                config, attn_implementation="eager", dtype=torch.bfloat16
            ).eval()
            _models[kind] = LoadedModel(model, tokenizer, describe(model, kind, "test", "tiny"))
        return _models[kind]
    return seeded_model(_models, "deepseek_v4_short", _short_config, tokenizer)


def _held(cache: Any) -> int:
    """Bytes of every tensor (not a scalar) the cache's layers hold, each storage once."""
    total, seen = 0, set()
    for layer in cache.layers:
        for value in vars(layer).values():
            items = value.values() if isinstance(value, dict) else [value]
            for t in items:
                if isinstance(t, torch.Tensor) and t.dim() and t.data_ptr() not in seen:
                    seen.add(t.data_ptr())
                    total += t.numel() * t.element_size()
    return total


@pytest.mark.parametrize("kind", ["own", "short", "bfloat16"])
def test_measured_formula_and_config_equal_what_the_cache_holds(tokenizer: Any, kind: str) -> None:
    engine = Engine(_model(kind, tokenizer))
    run = engine.start(engine.tokenize(PROMPT, chat=False), GREEDY, RunConfig(8))
    config = engine.model.config.to_dict()
    layout = layout_from_config(config)
    assert layout.layer_kv_copies == (1, 1) and layout.compressors
    for step in run:
        kv = step.kv
        assert kv.bytes_total == _held(run.cache) > 0
        assert kv.formula_bytes == kv.bytes_total and kv.state_bytes == 0
        assert kv.compressed_bytes == kv.compressed_formula_bytes > 0
        dtype = "bfloat16" if kind == "bfloat16" else "float32"
        said = build_report("m", config, kv.tokens, 1, dtype)
        assert said["total_bytes"] == kv.bytes_total
        assert said["compressed_bytes"] == kv.compressed_bytes
    if kind == "short":  # the window filled: each layer keeps its last window − 1 tokens
        assert kv.tokens > 8 and list(kv.held_tokens) == [5, 5]
        assert layout.windows == (6, 6)
    if kind == "bfloat16":  # the case the formula's wider gate covers
        assert run.cache.layers[1].overlap_gate["compressor"].dtype == torch.float32


def test_the_key_is_the_value_held_once(tokenizer: Any) -> None:
    engine = Engine(_model("own", tokenizer))
    run = engine.start(engine.tokenize(PROMPT, chat=False), GREEDY, RunConfig(1))
    kv = run.run_all()[-1].kv
    layer = run.cache.layers[0]
    assert layer.values is layer.keys
    assert kv.per_layer[0, 1] == 0 and kv.per_layer[0, 0] == layer.keys.numel() * 4
    assert engine.info.layer_kv_copies == (1, 1)


def test_compressors_bytes_by_hand() -> None:
    one = ((4, 16, 8, 4),)  # two series: the overlap kept once a window has closed
    assert compressors_bytes(one, 3, 4) == 2 * 3 * 16 * 4
    assert compressors_bytes(one, 9, 4) == (2 * 1 * 16 + 2 * 8 + 2 * 4 * 8) * 4
    # in bfloat16 the overlap's gate has had the float32 bias added: float32
    assert compressors_bytes(one, 9, 2) == (2 * 1 * 16 + 2 * 8 + 4 * 8) * 2 + 4 * 8 * 4
    assert compressors_bytes(((8, 8, 8, 4),), 9, 4) == (2 * 8 + 8) * 4  # one series: no overlap


def test_llm_lens_kv_writes_the_sum_that_adds_up(tokenizer: Any) -> None:
    from llm_lens.core.kvcache.report import format_report

    config = _model("own", tokenizer).model.config.to_dict()
    said = build_report("m", config, 20, 1, "float32")
    text = format_report(said)
    assert said["num_kv_heads"] == 1 and "1 KV heads (MQA)" in text
    kv_part = 2 * 1 * 1 * 8 * 4 * 20  # two layers, one tensor, one head, head size 8, float32
    assert f"= {kv_part} bytes" in text
    extra = said["compressed_bytes"]
    assert f"{kv_part} + {extra} = {said['total_bytes']} bytes" in text
