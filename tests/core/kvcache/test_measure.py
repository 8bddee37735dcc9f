"""KV-cache bytes (``core/kvcache.py``) against the tensors the cache holds, at every step.

The real SmolLM2 (30 layers, 3 KV heads of 64, float32) and a tiny GQA Llama.
"""

from __future__ import annotations

import numpy as np

from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.conftest import make_tiny

PROMPT = "Explain transformers like I am 12"


SMOL_BYTES_PER_TOKEN = 2 * 30 * 3 * 64 * 4  # K and V × layers × kv heads × head dim × float32


def held_bytes(cache) -> tuple[int, int]:
    """(bytes, tokens) of every key and value tensor the transformers cache holds right now."""
    total, tokens = 0, 0
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            if t is not None and t.numel():
                total += t.numel() * t.element_size()
                tokens = max(tokens, t.shape[-2])
    return total, tokens


def test_kv_bytes_equal_formula_and_held_tensors_at_every_step(engine):
    info = engine.info
    assert (info.num_layers, info.num_kv_heads, info.head_dim, info.dtype) == (
        30,
        3,
        64,
        "float32",
    )
    prompt = engine.tokenize(PROMPT)
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=6))
    previous = 0
    for step in run:
        kv = step.kv
        held, tokens = held_bytes(run.cache)  # measured now, before the next step mutates it
        assert tokens == kv.tokens == step.position + 1 == len(prompt) + step.index
        assert kv.bytes_total == held == kv.formula_bytes == SMOL_BYTES_PER_TOKEN * tokens
        assert kv.mha_bytes == 3 * kv.formula_bytes  # 9 query heads share 3 KV heads
        expected_added = SMOL_BYTES_PER_TOKEN * (len(prompt) if step.is_prefill else 1)
        assert kv.bytes_added == expected_added == kv.bytes_total - previous
        assert kv.per_layer.shape == (30, 2) and kv.per_layer.dtype == np.int64
        assert (kv.per_layer == tokens * 3 * 64 * 4).all()  # every layer's K and V alike
        assert kv.device_allocated is None and kv.device_reserved is None  # CPU
        previous = kv.bytes_total
    assert len(run.steps) == 6


def test_kv_bytes_of_a_gqa_tiny_model(loaded):
    tiny = make_tiny(loaded.tokenizer, num_attention_heads=8, num_key_value_heads=2)
    eng = Engine(tiny)
    run = eng.start(eng.tokenize("hello there", chat=False), GREEDY, RunConfig(max_new_tokens=3))
    for step in run:
        held, tokens = held_bytes(run.cache)
        assert step.kv.bytes_total == held == 2 * 2 * 2 * 8 * 4 * tokens
        assert step.kv.mha_bytes == 4 * step.kv.formula_bytes
