"""``llm-lens kv`` on hybrid and latent-attention configs: the formula from config.json alone
counts K/V only in the layers that keep them (not a Mamba, DeltaNet or convolution layer) and a
latent layer's latent once a token, and equals the K/V a run of the tiny model holds."""

from __future__ import annotations

from typing import Any

import pytest

from llm_lens.core.kvcache import build_report, format_report, layout_from_config
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.hybrid_families import HYBRIDS, hybrid_model

# Zamba2's shared attention block is twice the config's head_dim wide (it reads the input and
# the embeddings side by side): only its loaded model (ModelInfo.layer_head_dims) knows that
NOT_FROM_CONFIG = {"zamba2": "its shared block's head size is not in config.json"}


@pytest.mark.parametrize("name", list(HYBRIDS))
def test_config_formula_equals_the_kv_a_run_holds(tokenizer: Any, name: str) -> None:
    if name in NOT_FROM_CONFIG:
        pytest.skip(NOT_FROM_CONFIG[name])
    engine = Engine(hybrid_model(name, tokenizer))
    run = engine.start(engine.tokenize("one two three", chat=False), GREEDY, RunConfig(3))
    run.run_all()
    layout = layout_from_config(engine.model.config.to_dict())
    kinds = engine.info.layer_kinds
    assert layout.kv_free == tuple(
        "attention" not in k.replace("linear attention", "") for k in kinds
    )
    for step in run.steps:
        assert layout.total_bytes(step.kv.tokens, engine.info.dtype_bytes) == step.kv.growing_bytes


def test_latent_attention_counts_its_latent_not_per_head_kv() -> None:
    """DeepSeek-V3's shapes: a 512 latent and a 64 rotary key a token, against 128 heads of
    (128 + 64) keys and 128 values had every head its own."""
    cfg = dict(model_type="deepseek_v3", num_hidden_layers=61, num_attention_heads=128,
               num_key_value_heads=128, hidden_size=7168, kv_lora_rank=512, qk_rope_head_dim=64,
               qk_nope_head_dim=128, v_head_dim=128, head_dim=64, layer_types=None)  # fmt: skip
    layout = layout_from_config(cfg)
    assert layout.bytes_per_token(2) == 61 * (512 + 64) * 2
    assert layout.mha_bytes_per_token(2) == 61 * 128 * (128 + 64 + 128) * 2
    assert layout.total_bytes(1000, 2) == 1000 * layout.bytes_per_token(2)
    text = format_report(build_report("ds", cfg, 1000, 1, "bf16"))
    assert f"61 × 576 × 2 × 1000 = {1000 * 61 * 576 * 2} bytes" in text


def test_a_pure_state_space_config_keeps_no_kv_even_with_a_field_its_class_refuses() -> None:
    """Mamba2's config.json as transformers writes it encodes ∞ in ``time_step_limit``, which
    its own class refuses back; the plain fields still say every layer is ``linear_attention``."""
    cfg = dict(model_type="mamba2", num_hidden_layers=2, num_heads=4, head_dim=16,
               hidden_size=32, time_step_limit=[0.0, {"__float__": "Infinity"}])  # fmt: skip
    layout = layout_from_config(cfg)
    assert layout.kv_free == (True, True) and layout.kv_layers == 0
    assert layout.total_bytes(100, 2) == layout.bytes_per_token(2) == 0
    assert "0 of 2 keep K/V" in format_report(build_report("m", cfg, 100, 1, "bf16"))


@pytest.mark.parametrize("name", ["qwen3_next", "granitemoehybrid", "lfm2", "falcon_h1", "mamba2"])
def test_config_predicts_the_constant_state_a_run_holds(tokenizer: Any, name: str) -> None:
    """``llm-lens kv`` builds the config's modules on the meta device and reads each mixer's
    conv/recurrent state as the loaded model's are read: equal to what the cache holds."""
    engine = Engine(hybrid_model(name, tokenizer))
    run = engine.start(engine.tokenize("one two", chat=False), GREEDY, RunConfig(2))
    run.run_all()
    held = run.steps[-1].kv.state_bytes
    assert held > 0
    cfg = engine.model.config.to_dict()
    report = build_report("m", cfg, 64, 1, "float32")
    assert report["state_bytes"] == held
    assert build_report("m", cfg, 64, 3, "float32")["state_bytes"] == 3 * held  # per sequence
    text = format_report(report)
    assert f"({held} bytes) of conv/recurrent state, constant" in text
    assert f"({report['total_bytes'] + held} bytes): the K/V above plus that state" in text


def test_a_plain_config_reports_no_state() -> None:
    cfg = dict(model_type="llama", num_hidden_layers=2, num_attention_heads=4, hidden_size=32)
    assert "state_bytes" not in build_report("m", cfg, 16, 1, "bf16")
