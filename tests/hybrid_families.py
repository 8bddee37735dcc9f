"""Tiny random hybrid and state-space models, built from their config classes (fast tests).

Each layer pattern holds one layer of each mixer kind the family has (a Mamba, gated-DeltaNet or
short-convolution layer, then an attention layer), so a 2-layer model covers the family's kinds;
DeepSeek-V3 is here for its latent attention, DeepSeek-V3.2 for its sparse attention, MiniMax
for its lightning attention in a cache of its own, Gemma 4 for head sizes that differ by layer,
Llama 4 for chunked attention, Mamba for a pure state-space model, Cohere and Cohere 2 for their
logit scale.
Built like :mod:`tests.families` (the bundled tokenizer, 32-wide residual, a fixed seed); a
family the installed transformers cannot build at this size is skipped with its reason.
"""

from __future__ import annotations

from typing import Any

from tests.families import COMMON, seeded_model

MAMBA2 = dict(mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1,
              mamba_chunk_size=8, mamba_d_conv=4, mamba_expand=2)  # fmt: skip
# name -> (model_type, config overrides); None drops a COMMON key the family does not have
HYBRIDS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3_next": (
        "qwen3_next",
        dict(
            head_dim=8,
            layer_types=["linear_attention", "full_attention"],
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
            linear_conv_kernel_dim=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=16,
        ),
    ),  # fmt: skip
    "granitemoehybrid": (
        "granitemoehybrid",
        dict(
            layer_types=["mamba", "attention"],
            num_local_experts=4,
            num_experts_per_tok=2,
            shared_intermediate_size=32,
            **MAMBA2,
        ),
    ),  # fmt: skip
    "lfm2": (
        "lfm2",
        dict(
            layer_types=["conv", "full_attention"],
            conv_L_cache=3,
            block_ff_dim=64,
            block_auto_adjust_ff_dim=False,
        ),
    ),  # fmt: skip
    "jamba": (
        "jamba",
        dict(
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            num_experts=2,
            num_experts_per_tok=1,
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_dt_rank=4,
        ),
    ),  # fmt: skip
    "bamba": ("bamba", dict(attn_layer_indices=[1], **MAMBA2)),
    "nemotron_h": (
        "nemotron_h",
        dict(
            hybrid_override_pattern="M*",
            mamba_num_heads=4,
            mamba_head_dim=16,
            ssm_state_size=8,
            n_groups=1,
            chunk_size=8,
            conv_kernel=4,
            expand=2,
            head_dim=8,
        ),
    ),  # fmt: skip
    "zamba2": (
        "zamba2",
        dict(
            layers_block_type=["mamba", "hybrid"],
            mamba_d_state=8,
            mamba_headdim=16,
            n_mamba_heads=4,
            mamba_ngroups=1,
            chunk_size=8,
            mamba_d_conv=4,
            mamba_expand=2,
            use_mem_rope=True,
            adapter_rank=8,
            num_mem_blocks=1,
        ),
    ),  # fmt: skip
    "mamba2": (
        "mamba2",
        dict(
            num_heads=4,
            head_dim=16,
            state_size=8,
            n_groups=1,
            chunk_size=8,
            conv_kernel=4,
            expand=2,
            num_attention_heads=None,
            num_key_value_heads=None,
            intermediate_size=None,
        ),
    ),  # fmt: skip
    "falcon_h1": (
        "falcon_h1",
        dict(head_dim=8, mamba_d_ssm=64, lm_head_multiplier=0.5, **MAMBA2),
    ),  # fmt: skip
    "deepseek_v3": (
        "deepseek_v3",
        dict(
            kv_lora_rank=16,
            q_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            num_key_value_heads=4,
        ),
    ),  # fmt: skip
    "deepseek_v32": (
        "deepseek_v32",
        dict(
            kv_lora_rank=16,
            q_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            num_key_value_heads=4,
            index_n_heads=2,
            index_head_dim=16,
            index_topk=4,
        ),
    ),  # fmt: skip  (an indexer reads 4 keys of each query's: fewer than the test prompts')
    "minimax": (
        "minimax",
        dict(
            layer_types=["linear_attention", "full_attention"],
            head_dim=8,
            num_local_experts=4,
            num_experts_per_tok=2,
        ),
    ),  # fmt: skip  (lightning attention, in a cache class of its own)
    "gemma4_text": (
        "gemma4_text",
        dict(
            layer_types=["sliding_attention", "full_attention"],
            head_dim=8,
            sliding_window=5,
            per_layer_config={"1": {"head_dim": 16}},
            hidden_size_per_layer_input=8,
            vocab_size_per_layer_input="vocab",
        ),
    ),  # fmt: skip  (its full-attention layer's heads twice as wide)
    "llama4_text": (
        "llama4_text",
        dict(
            head_dim=8,
            num_local_experts=4,
            num_experts_per_tok=1,
            intermediate_size_mlp=64,
            attention_chunk_size=4,
            no_rope_layer_interval=2,
        ),
    ),  # fmt: skip  (chunked attention, a layer without RoPE)
    "mamba": (
        "mamba",
        dict(
            state_size=8,
            conv_kernel=4,
            expand=2,
            num_attention_heads=None,
            num_key_value_heads=None,
            intermediate_size=None,
        ),
    ),  # fmt: skip  (Mamba 1: state-space only)
    "cohere": ("cohere", dict(logit_scale=0.25)),
    "cohere2": ("cohere2", dict(logit_scale=0.25, sliding_window=5, head_dim=8)),
}
# each family's layer kinds, as core.anatomy names them (what the tests require)
KINDS: dict[str, tuple[str, ...]] = {
    "qwen3_next": ("linear attention", "attention"),
    "granitemoehybrid": ("state-space", "attention"),
    "lfm2": ("short convolution", "attention"),
    "jamba": ("state-space", "attention"),
    "bamba": ("state-space", "attention"),
    "nemotron_h": ("state-space", "attention"),
    "zamba2": ("state-space", "attention + state-space"),
    "mamba2": ("state-space", "state-space"),
    "falcon_h1": ("attention + state-space",) * 2,
    "deepseek_v3": ("latent attention",) * 2,
    "deepseek_v32": ("sparse latent attention",) * 2,
    "minimax": ("linear attention", "attention"),
    "gemma4_text": ("attention",) * 2,
    "llama4_text": ("attention",) * 2,
    "mamba": ("state-space",) * 2,
    "cohere": ("attention",) * 2,
    "cohere2": ("attention",) * 2,
}
_cache: dict[str, Any] = {}


def hybrid_config(name: str, vocab_size: int) -> Any:
    """The family's config, or ``pytest.skip`` with the reason transformers cannot build it."""
    import pytest
    from transformers import CONFIG_MAPPING

    model_type, overrides = HYBRIDS[name]
    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"the installed transformers has no {model_type}")
    cfg = {**COMMON, **overrides, "vocab_size": vocab_size}
    cfg = {k: vocab_size if v == "vocab" else v for k, v in cfg.items()}  # Gemma 4's per-layer
    try:
        return CONFIG_MAPPING[model_type](**{k: v for k, v in cfg.items() if v is not None})
    except (ValueError, TypeError) as exc:
        pytest.skip(f"transformers cannot build a tiny {model_type}: {exc}")


def hybrid_model(name: str, tokenizer: Any) -> Any:
    """``LoadedModel`` of the hybrid family ``name`` with ``tokenizer``'s vocabulary, built once."""
    return seeded_model(_cache, name, hybrid_config, tokenizer)
