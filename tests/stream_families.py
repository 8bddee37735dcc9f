"""Tiny random models whose residual is several parallel streams, built from their configs.

Gemma 3n keeps 4 AltUp streams (stream axis first: (4, batch, seq, hidden)); DeepSeek-V4 and
HY-v4 keep 4 hyper-connection streams ((batch, seq, 4, hidden)). Built like
:mod:`tests.hybrid_families` (the bundled tokenizer, a fixed seed); a family the installed
transformers cannot build at this size is skipped with its reason.
"""

from __future__ import annotations

from typing import Any

from tests.families import COMMON, seeded_model

# name -> (model_type, config overrides, (stream count, stream axis))
STREAMS: dict[str, tuple[str, dict[str, Any], tuple[int, int]]] = {
    "gemma3n_text": (
        "gemma3n_text",
        dict(
            num_hidden_layers=4,
            head_dim=8,
            intermediate_size=[64] * 4,
            layer_types=["sliding_attention", "full_attention"] * 2,
            sliding_window=5,
            num_kv_shared_layers=2,
            activation_sparsity_pattern=[0.0] * 4,
            hidden_size_per_layer_input=8,
            vocab_size_per_layer_input="vocab",
            altup_num_inputs=4,
        ),
        (4, 0),
    ),  # fmt: skip  (two layers that keep K/V, two that read theirs)
    "deepseek_v4": (
        "deepseek_v4",
        dict(
            num_key_value_heads=4,
            head_dim=8,
            q_lora_rank=16,
            moe_intermediate_size=16,
            n_routed_experts=4,
            num_experts_per_tok=2,
            layer_types=["heavily_compressed_attention", "compressed_sparse_attention"],
            mlp_layer_types=["hash_moe", "moe"],
            index_n_heads=2,
            index_head_dim=16,
            index_topk=4,
            hc_mult=4,
        ),
        (4, 2),
    ),  # fmt: skip
    "hy_v4": (
        "hy_v4",
        dict(
            num_key_value_heads=4,
            head_dim=8,
            moe_intermediate_size=16,
            n_routed_experts=4,
            num_experts_per_tok=2,
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_nope_head_dim=8,
            qk_rope_head_dim=8,
            v_head_dim=8,
            mlp_layer_types=["dense", "sparse"],
            layer_types=["indexed_attention"] * 2,
            indexer_types=["full", "full"],
            index_topk=4,
            index_head_dim=16,
            index_n_heads=2,
            hc_mult=4,
        ),
        (4, 2),
    ),  # fmt: skip
}
_cache: dict[str, Any] = {}


def stream_config(name: str, vocab_size: int) -> Any:
    """The family's config, or ``pytest.skip`` with the reason transformers cannot build it."""
    import pytest
    from transformers import CONFIG_MAPPING

    model_type, overrides, _layout = STREAMS[name]
    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"the installed transformers has no {model_type}")
    cfg = {**COMMON, **overrides, "vocab_size": vocab_size}
    cfg = {k: vocab_size if v == "vocab" else v for k, v in cfg.items()}
    try:
        return CONFIG_MAPPING[model_type](**{k: v for k, v in cfg.items() if v is not None})
    except (ValueError, TypeError) as exc:
        pytest.skip(f"transformers cannot build a tiny {model_type}: {exc}")


def stream_model(name: str, tokenizer: Any) -> Any:
    """``LoadedModel`` of the family ``name`` with ``tokenizer``'s vocabulary, built once."""
    return seeded_model(_cache, name, stream_config, tokenizer)
