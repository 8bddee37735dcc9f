"""Sliding-window and hybrid KV caches: measured bytes, the per-layer formula and ``llm-lens kv``.

Tiny random models of each windowed family fill a transformers ``DynamicCache`` through their own
forward; at every step the bytes the tensors hold must equal the formula, windowed layers must stop
growing, and ``llm-lens kv`` on the saved ``config.json`` must predict the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core import kvcache
from llm_lens.core.cli.kv import main as main_kv
from llm_lens.core.kvcache import layout_from_config
from llm_lens.core.loading import describe

VOCAB, LAYERS, WINDOW, PROMPT, DECODE = 128, 4, 5, 9, 5
FAMILIES: dict[str, tuple[str, dict[str, Any], tuple[int, ...]]] = {
    "mistral": ("mistral", {"sliding_window": WINDOW}, (WINDOW,) * LAYERS),
    "gemma2": ("gemma2", {"sliding_window": WINDOW, "head_dim": 8}, (WINDOW, 0, WINDOW, 0)),
    "gemma3": (
        "gemma3_text",
        {"sliding_window": WINDOW, "head_dim": 8, "sliding_window_pattern": 3},
        (WINDOW, WINDOW, 0, WINDOW),
    ),
    "qwen2": (
        "qwen2",
        {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 2},
        (0, 0, WINDOW, WINDOW),
    ),
}


def _config(model_type: str, **overrides: Any) -> Any:
    from transformers import CONFIG_MAPPING

    cfg = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    cfg.update(overrides)
    return CONFIG_MAPPING[model_type](**cfg)


def _model(config: Any) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


def _held_bytes(cache: Any) -> int:
    """Independent of kvcache: bytes of every key and value tensor in the cache."""
    return sum(
        layer.keys.nbytes + layer.values.nbytes for layer in cache.layers if layer.keys is not None
    )


def _steps(model: Any) -> list[tuple[int, Any]]:
    """(tokens seen, KVCacheStats) after the prefill and each decode step of a greedy run."""
    from transformers import DynamicCache

    info = describe(model, "tiny", "test", "tiny")
    cache = DynamicCache(config=model.config)
    ids = torch.arange(3, 3 + PROMPT)[None]  # (1, PROMPT)
    out, before, seen = [], 0, 0
    with torch.inference_mode():
        for _ in range(1 + DECODE):
            logits = model(ids, cache=cache, use_cache=True).logits
            seen += ids.shape[1]
            stats = kvcache.measure(cache, info, before)
            assert stats.bytes_total == _held_bytes(cache)
            out.append((seen, stats))
            before = stats.bytes_total
            ids = logits[:, -1:].argmax(-1)  # (1, 1)
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_measured_equals_formula_at_every_step(family: str) -> None:
    model_type, overrides, windows = FAMILIES[family]
    model = _model(_config(model_type, **overrides))
    head_dim = getattr(model.config, "head_dim", None) or 32 // 4
    per_token_layer = 2 * 2 * head_dim * 4  # K and V, 2 KV heads, float32
    full = sum(1 for w in windows if w == 0)
    for i, (seen, kv) in enumerate(_steps(model)):
        assert kv.windows == windows
        assert kv.tokens == seen  # as the model has seen them, not the trimmed length
        held = [seen if w == 0 else min(seen, w - 1) for w in windows]
        assert kv.held_tokens is not None and kv.held_tokens.tolist() == held
        assert kv.formula_bytes == kv.bytes_total == per_token_layer * sum(held)
        assert kv.per_layer.sum(axis=1).tolist() == [per_token_layer * h for h in held]
        assert kv.mha_bytes == 2 * kv.formula_bytes  # 4 query heads, 2 KV heads
        if i:  # past the window: only the full-attention layers grow
            assert kv.bytes_added == per_token_layer * full


def test_windowed_layers_stop_growing() -> None:
    model_type, overrides, windows = FAMILIES["gemma2"]
    steps = _steps(_model(_config(model_type, **overrides)))
    first, last = steps[0][1].per_layer.sum(axis=1), steps[-1][1].per_layer.sum(axis=1)
    for layer, w in enumerate(windows):
        grew = last[layer] > first[layer]
        assert grew == (w == 0), (layer, w, first, last)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_kv_cli_predicts_the_measured_bytes(
    family: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_type, overrides, windows = FAMILIES[family]
    config = _config(model_type, **overrides)
    config.save_pretrained(tmp_path)
    measured = {seen: kv.bytes_total for seen, kv in _steps(_model(config))}
    for tokens, bytes_held in measured.items():
        argv = ["--config", str(tmp_path), "--tokens", str(tokens), "--dtype", "float32"]
        assert main_kv([*argv, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["layer_windows"] == list(windows)
        assert report["total_bytes"] == bytes_held, tokens
    assert main_kv(argv) == 0
    text = capsys.readouterr().out
    sliding = sum(1 for w in windows if w)
    assert f"{sliding} layers with a {WINDOW}-token window hold min(tokens, {WINDOW - 1})" in text
    assert f"= {measured[PROMPT + DECODE]} bytes" in text


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "qwen2"])
def test_raw_config_without_layer_types(family: str) -> None:
    """Hub configs often list no layer_types: transformers' own config class derives them."""
    model_type, overrides, windows = FAMILIES[family]
    raw = _config(model_type, **overrides).to_dict()
    raw.pop("layer_types")
    assert layout_from_config(raw).windows == windows


def test_qwen2_window_off_and_mistral_without_window() -> None:
    raw = _config("qwen2", sliding_window=WINDOW).to_dict()  # use_sliding_window false
    raw.pop("layer_types")
    raw["sliding_window"] = 32768  # as Qwen2 hub configs say, while use_sliding_window is false
    assert layout_from_config(raw).windows == (0,) * LAYERS
    mistral = _config("mistral", sliding_window=None).to_dict()
    assert layout_from_config(mistral).sliding_layers == 0


def _cached_heads(model: Any) -> int:
    """Independent of kvcache: the head dimension of the keys the model's cache holds."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(torch.arange(3, 3 + PROMPT)[None], cache=cache, use_cache=True)
    return int(cache.layers[0].keys.shape[1])


@pytest.mark.parametrize(
    ("variant", "held_heads"),
    [
        ({"new_decoder_architecture": True, "num_kv_heads": 2}, (2, 4)),
        ({"multi_query": True}, (1,)),
    ],
)
def test_falcon_measured_is_what_the_tensors_hold(
    variant: dict[str, Any], held_heads: tuple[int, ...]
) -> None:
    """Measured is what the tensors hold: multi-query stores one K/V head. The new decoder
    architecture stored K/V repeated to all 4 query heads up to transformers 5.18 and stores its
    2 KV heads since (5.25 here); this test was once thought order-dependent for that reason."""
    model = _model(_config("falcon", alibi=False, **variant))
    held = _cached_heads(model)
    assert held in held_heads
    kv = _steps(model)[0][1]
    assert kv.cached_kv_heads == held
    assert kv.bytes_total == 2 * LAYERS * held * (32 // 4) * 4 * PROMPT
    assert np.all(kv.held_tokens == PROMPT)


def test_engine_run_on_mistral_past_its_window(loaded: Any) -> None:
    """Through the step loop: every StepRecord's KV figures, the prompt longer than the window."""
    from llm_lens.core.loading import LoadedModel
    from llm_lens.core.loop.engine import Engine, RunConfig
    from llm_lens.core.sampling import GREEDY

    config = _config("mistral", sliding_window=WINDOW, vocab_size=len(loaded.tokenizer))
    model = _model(config)
    engine = Engine(LoadedModel(model, loaded.tokenizer, describe(model, "m", "t", "t")))
    prompt = engine.tokenize("The quick brown fox jumps over the lazy dog", chat=False)
    assert len(prompt) > WINDOW
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=4))
    per_layer_token = 2 * 2 * 8 * 4  # K and V, 2 KV heads, head_dim 8, float32
    for i, step in enumerate(run.run_all()):
        kv = step.kv
        assert kv.tokens == len(prompt) + i == step.position + 1
        assert kv.formula_bytes == kv.bytes_total == LAYERS * per_layer_token * (WINDOW - 1)
        assert kv.bytes_added == (kv.bytes_total if i == 0 else 0)
