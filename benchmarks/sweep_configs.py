"""Tiny configs of every decoder-only text model type, from each config class's defaults.

:func:`swept_types` lists the types of transformers' causal-LM mapping that are decoder-only
text models: not encoder-decoder (BART's decoder), not an encoder used as a decoder (BERT,
RoBERTa: they are in the masked-LM mapping), not a multimodal wrapper (Gemma 3's text model is
swept as ``gemma3_text``). :func:`shrink` makes one small generically: the sizes in
:data:`SIZES` under whichever spelling the config uses, nested sections (DBRX's ``attn_config``)
alike; the layers cut to one of each layer type the defaults list, every per-layer list cut
with them. :data:`OVERRIDES` holds the few families whose defaults need one more field.
"""

from __future__ import annotations

from typing import Any

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 64, 4, 2, 16
KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "kv_n_heads", "n_head_kv")
SIZES: dict[str, int] = {
    **dict.fromkeys(("hidden_size", "n_embd", "n_embed", "d_model", "word_embed_proj_dim"), HIDDEN),
    **dict.fromkeys(("num_attention_heads", "n_head", "n_heads", "num_heads"), HEADS),
    **dict.fromkeys(KV_HEAD_KEYS, KV_HEADS),  # or fewer: MQA's one stays one
    **dict.fromkeys(("head_dim", "attention_head_dim", "kv_channels"), HEAD_DIM),
    **dict.fromkeys(
        ("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size", "d_ff", "block_ff_dim"), 128
    ),
    **dict.fromkeys(
        (
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "expert_intermediate_size",
            "shared_intermediate_size",
            "moe_shared_expert_intermediate_size",
        ),
        32,
    ),  # fmt: skip
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 4),
    **dict.fromkeys(("num_experts_per_tok", "moe_top_k", "num_experts_per_token"), 2),
    **dict.fromkeys(("n_group", "topk_group", "first_k_dense_replace"), 1),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), 16),
    **dict.fromkeys(("qk_rope_head_dim", "qk_nope_head_dim"), 8),
    "v_head_dim": HEAD_DIM,
    **dict.fromkeys(("state_size", "ssm_state_size", "mamba_d_state", "d_state"), 8),
    **dict.fromkeys(("mamba_n_heads", "mamba_num_heads", "n_mamba_heads"), 4),
    **dict.fromkeys(("mamba_d_head", "mamba_head_dim", "mamba_headdim"), 32),
    **dict.fromkeys(("n_groups", "mamba_n_groups", "mamba_ngroups"), 1),
    **dict.fromkeys(("chunk_size", "mamba_chunk_size"), 8),
    **dict.fromkeys(("linear_num_value_heads", "linear_num_key_heads"), 2),
    **dict.fromkeys(("linear_key_head_dim", "linear_value_head_dim", "linear_head_dim"), HEAD_DIM),
    "linear_num_heads": HEADS,
    "rotary_dim": HEAD_DIM // 2,
    "hidden_size_per_layer_input": 8,  # Gemma 3n/4's per-layer inputs (a table per token)
    "index_n_heads": 2,
    "index_head_dim": HEAD_DIM,
    "index_topk": 4,
}
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
TYPE_KEYS = ("layer_types", "layers_block_type", "hybrid_override_pattern", "block_types")
# type -> fields set after shrinking (the defaults' own choice would leave a kind out or break)
OVERRIDES: dict[str, dict[str, Any]] = {
    "jamba": dict(
        attn_layer_period=2,
        attn_layer_offset=1,
        expert_layer_period=2,
        expert_layer_offset=1,
        mamba_dt_rank=8,
    ),  # fmt: skip
    "bamba": dict(attn_layer_indices=[1]),
    "mamba2": dict(head_dim=32),
    "falcon_h1": dict(mamba_d_ssm=128),
    "zamba": dict(attn_layer_period=2, attn_layer_offset=1, mamba_dt_rank=8),
    "dbrx": dict(attn_config=dict(rope_theta=10000.0, clip_qkv=8.0)),  # its defaults do not run
    "granitemoehybrid": dict(layer_types=["mamba", "attention"]),
    "gemma3n_text": dict(
        num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention"] * 2,
        num_kv_shared_layers=2,
        activation_sparsity_pattern=[0.0] * 4,
        intermediate_size=[128] * 4,
    ),  # two layers that keep K/V, two that read theirs
}
NOT_TEXT_DECODERS = frozenset({"attn_config", "ffn_config"})  # sub-configs of a text model


def swept_types() -> list[str]:
    """The decoder-only text model types of transformers' causal-LM mapping."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    out = []
    for t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        cls = CONFIG_MAPPING[t]
        if set(getattr(cls, "sub_configs", {}) or {}) - NOT_TEXT_DECODERS:
            continue  # a multimodal wrapper (or an encoder-decoder's parts)
        if t in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
            continue  # an encoder that can also decode
        try:
            if cls().is_encoder_decoder:
                continue
        except Exception:
            pass  # its defaults do not build: the sweep says so
        out.append(t)
    return out


def _layer_count(d: dict[str, Any]) -> tuple[str, int] | None:
    for key in LAYER_KEYS:
        if isinstance(d.get(key), int) and d[key] > 0:
            return key, d[key]
    return None


def kept_layers(d: dict[str, Any], count: int) -> list[int]:
    """The layers kept: the first of each type the config lists (at least two layers)."""
    for key in TYPE_KEYS:
        types = d.get(key)
        if isinstance(types, list | str) and len(types) == count:
            seen: dict[str, int] = {}
            for i in range(count):
                seen.setdefault(str(types[i]), i)
            keep = sorted(seen.values())
            return keep if len(keep) > 1 else keep + [keep[0] + 1]
    return [0, 1][: max(count, 1)]


def _per_layer(config: dict[str, Any], keep: list[int]) -> dict[str, Any]:
    """Gemma 4's ``per_layer_config`` (a layer's own sizes by its index) for the kept layers,
    renumbered; a layer's own head size stays twice the others' (it differs in the defaults)."""
    out = {}
    for key, fields in config.items():
        if str(key).isdigit() and int(key) in keep and isinstance(fields, dict):
            small = {k: (2 * HEAD_DIM if k == "head_dim" else SIZES.get(k, v)) for k, v in
                     fields.items()}  # fmt: skip
            out[str(keep.index(int(key))).zfill(len(str(key)))] = small
    return out


def shrink(d: dict[str, Any], vocab: int) -> dict[str, Any]:
    """``d`` (a config's ``to_dict()``) made tiny, in place of its sizes; nested sections too."""
    out = {}
    found = _layer_count(d)
    keep = kept_layers(d, found[1]) if found else []
    for key, value in d.items():
        if found and key == "per_layer_config" and isinstance(value, dict):
            out[key] = _per_layer(value, keep)
        elif isinstance(value, dict) and key.endswith("_config"):
            out[key] = shrink(value, vocab)
        elif key in SIZES and isinstance(value, int) and not isinstance(value, bool):
            out[key] = min(value, SIZES[key]) if key in KV_HEAD_KEYS else SIZES[key]
        elif key == "head_dim" and value is None:
            out[key] = HEAD_DIM  # derived later from sizes that are no longer the defaults
        elif found and key in LAYER_KEYS and value == found[1]:
            out[key] = len(keep)
        elif found and isinstance(value, list | str) and len(value) == found[1] > 2:
            cut = [value[i] for i in keep]
            size = next((SIZES[k] for k in SIZES if key.startswith(k)), None)  # heads per layer
            cut = [size if size and isinstance(v, int) else v for v in cut]
            out[key] = "".join(cut) if isinstance(value, str) else cut
        else:
            out[key] = value
    if isinstance(out.get("qk_rope_head_dim"), int):
        out["head_dim"] = out["qk_rope_head_dim"]  # latent attention: its rotary part
        if "num_key_value_heads" in out:  # every head reads the one latent
            out["num_key_value_heads"] = HEADS
        if "qk_head_dim" in out:  # derived, but kept by to_dict()
            out["qk_head_dim"] = out["qk_rope_head_dim"] + out.get("qk_nope_head_dim", 0)
    for key in ("vocab_size", "vocab_size_per_layer_input"):
        if key in out:
            out[key] = vocab
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if isinstance(out.get(key), int) and out[key] >= vocab:
            out[key] = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}[key]
    return out


def sweep_config(model_type: str, vocab: int) -> Any:
    """The tiny config of ``model_type`` (its class's defaults, shrunk, with its overrides)."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    fields = shrink(cls().to_dict(), vocab)
    for key, value in OVERRIDES.get(model_type, {}).items():
        merge = isinstance(value, dict) and isinstance(fields.get(key), dict)
        fields[key] = {**fields[key], **value} if merge else value
    fields.pop("model_type", None)
    fields.pop("transformers_version", None)
    return cls(**fields)
