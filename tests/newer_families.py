"""Tiny random models of the families issue 33's sweep found last: MiMo-V2-Flash (sliding
layers with twice the K/V heads, in code only), Inkling (attention beside a short convolution,
its sliding layers with their own head counts), LongCat-Flash (two attention sublayers a
block), CPM-Ant (its own position bias and prompt prefix) and GPT-1 (no cache). GPT-1 and
CPM-Ant are fed the whole sequence every step by their own ``generate()`` and run so in the
loop's uncached step mode (:data:`UNCACHED`). LongCat-Flash's records keep one row a block, its
cache one layer a sublayer.

Built like :mod:`tests.families` (the bundled tokenizer, a 32-wide residual, a fixed seed, the
model's own modules from its config class); a family the installed transformers cannot build
at this size is skipped with its reason.
"""

from __future__ import annotations

from typing import Any

from tests.families import COMMON, seeded_model

# name -> (model_type, config overrides); None drops a COMMON key the family does not have
NEWER: dict[str, tuple[str, dict[str, Any]]] = {
    "mimo_v2_flash": (
        "mimo_v2_flash",
        dict(
            head_dim=8,
            v_head_dim=8,
            sliding_window=5,
            layer_types=["full_attention", "sliding_attention"],
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
        ),
    ),  # fmt: skip
    "inkling": (
        "inkling_text",
        dict(
            head_dim=8,
            swa_num_attention_heads=8,  # its sliding layer: twice the query heads, its own K/V
            swa_num_key_value_heads=4,
            swa_head_dim=16,
            sliding_window_size=5,
            d_rel=4,
            rel_extent=16,
            layer_types=["hybrid_sliding", "hybrid"],
            mlp_layer_types=["sparse", "sparse"],
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            moe_intermediate_size=16,
        ),
    ),  # fmt: skip
    "longcat_flash": (
        "longcat_flash",
        dict(
            num_hidden_layers=None,
            num_layers=2,
            num_key_value_heads=4,
            ffn_hidden_size=64,
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_nope_head_dim=8,
            qk_rope_head_dim=8,
            head_dim=8,
            v_head_dim=8,
            n_routed_experts=4,
            moe_topk=2,
            zero_expert_num=2,
            expert_ffn_hidden_size=16,
            intermediate_size=None,
        ),
    ),  # two blocks of two attention sublayers each (four cache layers)
}
# families generate() feeds the whole sequence every step (GPT-1: no cache at all; CPM-Ant: with
# its cache, dropping the cached part itself): name -> (model_type, config overrides)
UNCACHED: dict[str, tuple[str, dict[str, Any]]] = {
    "openai-gpt": (
        "openai-gpt",
        dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, **dict.fromkeys(COMMON)),
    ),
    "cpmant": (
        "cpmant",
        dict(
            dim_head=8,
            dim_ff=64,
            prompt_length=4,
            num_key_value_heads=None,
            intermediate_size=None,
            max_position_embeddings=None,
            tie_word_embeddings=None,
        ),
    ),  # fmt: skip
}
_cache: dict[str, Any] = {}


def newer_config(name: str, vocab_size: int) -> Any:
    """The family's config, or ``pytest.skip`` with the reason transformers cannot build it."""
    import pytest
    from transformers import CONFIG_MAPPING

    model_type, overrides = {**NEWER, **UNCACHED}[name]
    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"the installed transformers has no {model_type}")
    cfg = {**COMMON, **overrides, "vocab_size": vocab_size}
    try:
        return CONFIG_MAPPING[model_type](**{k: v for k, v in cfg.items() if v is not None})
    except (ValueError, TypeError) as exc:
        pytest.skip(f"transformers cannot build a tiny {model_type}: {exc}")


def newer_model(name: str, tokenizer: Any) -> Any:
    """``LoadedModel`` of the family ``name`` with ``tokenizer``'s vocabulary, built once."""
    return seeded_model(_cache, name, newer_config, tokenizer)
