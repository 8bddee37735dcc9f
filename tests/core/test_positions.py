"""The Positions data is the model's own: its rotary module's cos/sin and inv_freq (with every
scaling, partial rotary and per-layer-type set), its learned table, or its ALiBi slopes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core.positions import (
    ALIBI,
    LEARNED,
    NONE,
    ROPE,
    position_view,
    view_arrays,
    view_from_arrays,
)

N = 40  # positions asked for: past the tiny models' 16-token original context where it matters
BASE = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)


def _model(model_type: str, **overrides: Any) -> Any:
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    cfg = {**BASE, **overrides}
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(CONFIG_MAPPING[model_type](**cfg)).eval()


def _rotary(model: Any) -> Any:
    base = getattr(model, "model", None) or getattr(model, "gpt_neox", None) or model.transformer
    return base.rotary_emb


def _assert_is_module_rotation(model: Any, n: int = N, layer_type: str = "") -> Any:
    """The view's angles and scaling rebuild exactly the cos/sin the rotary module returns."""
    view = position_view(model, n)
    assert view.kind == ROPE
    rope = next(s for s in view.rope if s.layer_type == layer_type)
    rotary = _rotary(model)
    x, ids = torch.zeros(1), torch.arange(n)[None]
    with torch.no_grad():
        cos, sin = rotary(x, ids, layer_type) if layer_type else rotary(x, ids)
    pairs = rope.pairs
    assert cos.shape[-1] == rope.rotary_dim == 2 * pairs
    angles = rope.angles.astype(np.float64)
    np.testing.assert_allclose(
        rope.attention_scaling * np.cos(angles), cos[0, :, :pairs].numpy(), atol=2e-6
    )
    np.testing.assert_allclose(
        rope.attention_scaling * np.sin(angles), sin[0, :, :pairs].numpy(), atol=2e-6
    )
    buffer = getattr(rotary, f"{layer_type}_inv_freq" if layer_type else "inv_freq")
    np.testing.assert_allclose(rope.inv_freq, buffer.numpy(), rtol=1e-6)
    return rope


def _theta_only(theta: float, dim: int) -> np.ndarray:
    """What the pane used to draw: θ and head_dim alone, no scaling."""
    return 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def test_llama_default_is_theta_and_head_dim() -> None:
    rope = _assert_is_module_rotation(_model("llama"))
    np.testing.assert_allclose(rope.inv_freq, _theta_only(10000.0, 8), rtol=1e-6)
    assert rope.rope_type == "default" and rope.rotary_dim == rope.head_dim == 8


def test_llama3_scaling_stretches_the_slow_pairs() -> None:
    """The issue: slowest wavelength 6.09e5 shown, 4.87e6 real (×factor 8) for Llama 3."""
    params = dict(
        rope_type="llama3",
        rope_theta=500000.0,
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=32,
    )
    model = _model("llama", hidden_size=64, num_attention_heads=4, rope_parameters=params)
    rope = _assert_is_module_rotation(model)  # head_dim 16, as in the checkpoint
    plain = 2 * np.pi / _theta_only(500000.0, 16)
    assert rope.wavelengths.max() == pytest.approx(8 * plain.max(), rel=1e-5)
    assert plain.max() == pytest.approx(6.09e5, rel=1e-2)
    assert rope.wavelengths.max() == pytest.approx(4.87e6, rel=1e-2)
    assert rope.wavelengths.min() == pytest.approx(plain.min(), rel=1e-5)  # fast pairs unchanged


def test_linear_scaling_divides_every_frequency() -> None:
    params = dict(rope_type="linear", rope_theta=10000.0, factor=4.0)
    rope = _assert_is_module_rotation(_model("llama", rope_parameters=params))
    np.testing.assert_allclose(rope.inv_freq, _theta_only(10000.0, 8) / 4, rtol=1e-6)


def test_yarn_scales_cos_and_sin() -> None:
    params = dict(
        rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16
    )
    rope = _assert_is_module_rotation(_model("llama", rope_parameters=params))
    assert rope.rope_type == "yarn"
    assert rope.attention_scaling == pytest.approx(0.1 * np.log(4.0) + 1.0)
    assert rope.score_vs_distance[0] == pytest.approx(2 * rope.pairs * rope.attention_scaling**2)


def test_dynamic_scaling_is_what_the_model_uses_for_this_length() -> None:
    """Dynamic NTK grows the base once the sequence passes the original context (here 16)."""
    params = dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)
    model = _model("llama", max_position_embeddings=16, rope_parameters=params)
    short = position_view(model, 8).rope[0]
    np.testing.assert_allclose(short.inv_freq, _theta_only(10000.0, 8), rtol=1e-6)
    rope = _assert_is_module_rotation(model, N)
    assert rope.inv_freq[-1] < short.inv_freq[-1]  # the long prompt is read with a larger base
    with torch.no_grad():  # a real forward of that length leaves the same frequencies behind
        model(torch.arange(3, 3 + N)[None])
    np.testing.assert_allclose(rope.inv_freq, _rotary(model).inv_freq.numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    ("model_type", "overrides", "rotary_dim"),
    [
        ("stablelm", {"partial_rotary_factor": 0.25}, 2),
        ("gpt_neox", {"rotary_pct": 0.25}, 2),
        ("phi", {"partial_rotary_factor": 0.5}, 4),
    ],
)
def test_partial_rotary_draws_only_the_rotated_pairs(
    model_type: str, overrides: dict[str, Any], rotary_dim: int
) -> None:
    rope = _assert_is_module_rotation(_model(model_type, **overrides))
    assert rope.rotary_dim == rotary_dim and rope.head_dim == 8
    assert rope.angles.shape == (N, rotary_dim // 2)


def test_gemma3_local_and_global_rope() -> None:
    model = _model(
        "gemma3_text",
        num_hidden_layers=4,
        head_dim=8,
        num_key_value_heads=2,
        sliding_window=8,
        sliding_window_pattern=2,
    )
    view = position_view(model, N)
    by_type = {s.layer_type: s for s in view.rope}
    assert set(by_type) == {"sliding_attention", "full_attention"}
    assert by_type["sliding_attention"].layers == (0, 2)
    assert by_type["full_attention"].layers == (1, 3)
    local = _assert_is_module_rotation(model, N, "sliding_attention")
    glob = _assert_is_module_rotation(model, N, "full_attention")
    assert local.theta == 10000.0 and glob.theta == 1000000.0
    np.testing.assert_allclose(glob.inv_freq, _theta_only(1e6, 8), rtol=1e-6)
    np.testing.assert_allclose(local.inv_freq, _theta_only(1e4, 8), rtol=1e-6)


def test_gpt2_learned_table_is_wpe() -> None:
    model = _model("gpt2", n_embd=32, n_layer=2, n_head=4, n_positions=64)
    view = position_view(model, N)
    assert view.kind == LEARNED and view.learned is not None
    assert view.learned.module == "transformer.wpe" and view.learned.offset == 0
    with torch.no_grad():
        expected = model.transformer.wpe(torch.arange(N)).numpy()  # (N, hidden)
    np.testing.assert_array_equal(view.learned.table, expected)
    unit = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(view.learned.similarity, unit @ unit.T, atol=1e-6)
    np.testing.assert_allclose(np.diag(view.learned.similarity), 1.0, atol=1e-6)


def test_opt_learned_table_with_its_offset() -> None:
    model = _model("opt", ffn_dim=64, word_embed_proj_dim=32)
    view = position_view(model, N)
    assert view.kind == LEARNED and view.learned is not None and view.learned.offset == 2
    mask = torch.ones(1, N, dtype=torch.long)
    with torch.no_grad():  # what OPT adds at positions 0 … N-1
        expected = model.model.decoder.embed_positions(mask)[0].numpy()
    np.testing.assert_array_equal(view.learned.table, expected)
    assert view.learned.table_size == 64


def test_learned_table_shorter_than_asked() -> None:
    model = _model("gpt2", n_embd=32, n_layer=2, n_head=4, max_position_embeddings=16)
    assert position_view(model, N).learned.table.shape == (16, 32)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("model_type", "overrides", "scale"),
    [("falcon", {"alibi": True}, 1 / np.sqrt(8)), ("bloom", {"n_layer": 2, "n_head": 4}, 1.0)],
)
def test_alibi_slopes(model_type: str, overrides: dict[str, Any], scale: float) -> None:
    """ALiBi's geometric slopes 2^(-8h/n) for n = 4 heads, from the model's own function."""
    model = _model(model_type, **overrides)
    view = position_view(model, N)
    assert view.kind == ALIBI and view.alibi is not None
    np.testing.assert_array_equal(view.alibi.slopes, [2**-2, 2**-4, 2**-6, 2**-8])
    assert view.alibi.bias_scale == pytest.approx(scale)


def test_falcon_without_alibi_is_rope() -> None:
    _assert_is_module_rotation(_model("falcon", alibi=False))


def test_no_position_information() -> None:
    class Bare(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            from transformers import LlamaConfig

            self.config = LlamaConfig(**BASE)
            self.embed = torch.nn.Embedding(128, 32)

    view = position_view(Bare(), N)
    assert view.kind == NONE and not view.rope and view.learned is None and view.alibi is None


def test_bundled_model_rope(loaded: Any) -> None:
    """SmolLM2: default RoPE, θ 100000 (as its config says), all 64 dims rotated."""
    view = position_view(loaded.model, 12)
    rope = view.rope[0]
    assert (rope.theta, rope.rotary_dim, rope.head_dim) == (100000.0, 64, 64)
    np.testing.assert_allclose(rope.inv_freq, _theta_only(100000.0, 64), rtol=1e-6)


@pytest.mark.parametrize(
    ("model_type", "overrides"),
    [
        ("gemma3_text", dict(num_hidden_layers=4, head_dim=8, num_key_value_heads=2,
                             sliding_window=8, sliding_window_pattern=2)),
        ("opt", dict(ffn_dim=64, word_embed_proj_dim=32)),
        ("bloom", dict(n_layer=2, n_head=4)),
    ],
)  # fmt: skip
def test_session_form_round_trips(model_type: str, overrides: dict[str, Any]) -> None:
    import json

    view = position_view(_model(model_type, **overrides), 12)
    arrays, meta = view_arrays(view)
    back = view_from_arrays(
        {k: np.array(v) for k, v in arrays.items()}, json.loads(json.dumps(meta))
    )
    assert back.kind == view.kind and back.positions == 12
    assert [s.layers for s in back.rope] == [s.layers for s in view.rope]
    for a, b in zip(back.rope, view.rope, strict=True):
        np.testing.assert_array_equal(a.angles, b.angles)
        assert (a.theta, a.rotary_dim, a.layer_type) == (b.theta, b.rotary_dim, b.layer_type)
    if view.learned is not None:
        np.testing.assert_array_equal(back.learned.table, view.learned.table)
        assert back.learned.offset == view.learned.offset
    if view.alibi is not None:
        np.testing.assert_array_equal(back.alibi.slopes, view.alibi.slopes)
