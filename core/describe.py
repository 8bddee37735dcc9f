"""A loaded model's description: :func:`describe` reads the shapes the panes need from its
config and its own modules into a :class:`~llm_lens.core.model_info.ModelInfo`.

:func:`llm_lens.core.loading.load_model` calls it on every model it loads (and names it too);
the NDIF engine and the tests call it on a model built another way.
"""

from __future__ import annotations

from typing import Any

from llm_lens.core.anatomy import model_wide
from llm_lens.core.errors import ModelLoadError
from llm_lens.core.model_info import ModelInfo

LEARNED_TABLES = ("wpe", "embed_positions")  # GPT-2's and OPT's learned position tables


def describe(model: Any, name: str, source: str, weights_id: str) -> ModelInfo:
    """Read the shapes the panes need from a loaded model's config."""
    cfg = model.config.get_text_config(decoder=True)
    heads = attention_heads(cfg)
    head_dim = (
        model_wide(cfg, "head_dim") or getattr(cfg, "dim_head", 0) or cfg.hidden_size // heads
    )
    rope = getattr(cfg, "rope_parameters", None) or {}
    theta = rope.get("rope_theta") if isinstance(rope, dict) else None
    theta = theta or getattr(cfg, "rope_theta", None)
    has_rope = theta is not None or hasattr(getattr(model, "model", model), "rotary_emb")
    learned = any(n.rsplit(".", 1)[-1] in LEARNED_TABLES for n, _m in model.named_modules())
    alibi = bool(getattr(cfg, "alibi", False))  # Falcon's ALiBi variant (its config has a θ)
    from llm_lens.core.placement import placement_of
    from llm_lens.core.quantize import quantization_note

    param = next(model.parameters())
    placed = placement_of(model)
    places = dict.fromkeys(p.where for p in placed)  # in the device map's order
    kv = kv_heads(model, cfg)
    fields = _layer_fields(model, head_dim, heads, kv)
    own = fields.get("layer_heads", ())
    if own:  # layers with head counts of their own (Inkling): the widest layer's, and its K/V
        widest = own.index(max(own))
        heads, kv = own[widest], fields["layer_kv_heads"][widest] or kv
    return ModelInfo(
        name=name,
        source=source,
        architecture=(getattr(cfg, "architectures", None) or [type(model).__name__])[0],
        num_layers=fields.pop("blocks", cfg.num_hidden_layers),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        hidden_size=cfg.hidden_size,
        vocab_size=cfg.vocab_size,
        context_length=getattr(cfg, "max_position_embeddings", None) or 2048,
        dtype=str(param.dtype).removeprefix("torch."),
        device="+".join(places) if placed else str(param.device),
        num_parameters=sum(p.numel() for p in model.parameters()),
        position_kind=_position_kind(learned, alibi, has_rope),
        rope_theta=float(theta) if theta else None,
        weights_id=weights_id,
        attention_note=_attention_note(model),
        placement=tuple((p.name, p.where, p.nbytes) for p in placed),
        quantization=quantization_note(model),
        **fields,
    )


def attention_heads(cfg: Any) -> int:
    """Query heads of the attention layers; 1 for a model with no attention at all (Mamba2's
    config has no ``num_attention_heads``: its rows are one empty head)."""
    return int(getattr(cfg, "num_attention_heads", None) or 1)


def _layer_fields(model: Any, head_dim: int, heads: int, kv: int) -> dict[str, Any]:
    """Per layer, from the model's own modules (:class:`~llm_lens.core.anatomy.Anatomy`): its
    mixer kind, its attention's head size (0 without attention) and the elements of constant
    state its cache keeps; nothing when the layers cannot be found (the Engine says why)."""
    from llm_lens.core.anatomy import (
        Anatomy,
        find_mlp,
        kv_heads_of,
        latent_elements,
        layer_state_elements,
    )

    try:
        anatomy = Anatomy.of(model)
    except ModelLoadError:
        return {}
    dims = tuple(
        0 if a is None else int(getattr(a, "head_dim", None) or head_dim) for a in anatomy.attn
    )
    return {
        "layer_kinds": anatomy.kinds,
        "layer_head_dims": dims,
        "state_elements": tuple(
            layer_state_elements(la, m)
            for la, m in zip(anatomy.layers, anatomy.state_mixers, strict=True)
        ),
        # a block of several attention sublayers (LongCat-Flash) caches each one's latent
        "latent_dims": tuple(anatomy.sublayers * latent_elements(a) for a in anatomy.attn),
        "layer_kv_heads": tuple(kv_heads_of(a, heads, kv) for a in anatomy.attn),
        "layer_mlps": tuple(find_mlp(anatomy, i) is not None for i in range(len(anatomy.layers))),
        **_layer_heads(anatomy.attn, heads),
        **_compressing(anatomy.attn, heads, kv, dims),
        **_residual_fields(anatomy),
        **({"blocks": len(anatomy.layers)} if anatomy.sublayers > 1 else {}),
        **({"sublayers": anatomy.sublayers} if anatomy.sublayers > 1 else {}),
    }


def _compressing(
    attn: list[Any], heads: int, kv: int, dims: tuple[int, ...]
) -> dict[str, tuple[Any, ...]]:
    """``layer_kv_copies`` and ``layer_compressors`` from each attention module
    (:mod:`llm_lens.core.kvcache.compressed`), where some layer keeps one K/V vector or has a
    compressor (DeepSeek-V4); nothing elsewhere."""
    from llm_lens.core.anatomy import kv_heads_of
    from llm_lens.core.compressing import compressors_of, kv_copies

    copies = tuple(
        kv_copies(a, kv_heads_of(a, heads, kv), d) for a, d in zip(attn, dims, strict=True)
    )
    found = tuple(compressors_of(a) for a in attn)
    out: dict[str, tuple[Any, ...]] = {}
    if any(c != 2 for c in copies):
        out["layer_kv_copies"] = copies
    if any(found):
        out["layer_compressors"] = found
    return out


def _layer_heads(attn: list[Any], heads: int) -> dict[str, tuple[int, ...]]:
    """``layer_heads`` where layers' attention modules have query-head counts of their own
    (Inkling's sliding layers: ``swa_num_attention_heads``), read from each module; nothing
    where every attention layer has the config's ``heads``."""
    from llm_lens.core.anatomy import query_heads_of

    counts = tuple(query_heads_of(a, heads) for a in attn)
    return {"layer_heads": counts} if any(c not in (0, heads) for c in counts) else {}


def _residual_fields(anatomy: Any) -> dict[str, Any]:
    """The residual's parallel streams (:mod:`llm_lens.core.streams`) and, where several, the
    note saying what is shown of them."""
    from llm_lens.core.streams import streams_of

    layout = streams_of(anatomy)
    note = layout.note() if layout.several else ""
    return {"residual_note": note, "residual_streams": layout.count}


def _attention_note(model: Any) -> str:
    """Empty when the family's attention goes through transformers' ``AttentionInterface``
    (where LLM Lens records it); otherwise the one line the Attention pane shows instead."""
    can_set = getattr(type(model), "_can_set_attn_implementation", None)
    if callable(can_set) and can_set():
        return ""
    return (
        f"{type(model).__name__} computes attention inside its own code, not through "
        "transformers' AttentionInterface, so LLM Lens cannot record its attention maps"
    )


def _position_kind(learned: bool, alibi: bool, rope: bool) -> str:
    if learned:
        return "learned"
    return "alibi" if alibi else ("rope" if rope else "none")


def kv_heads(model: Any, cfg: Any) -> int:
    """How many key/value heads the attention really has: from the attention module's own
    ``num_key_value_groups`` (Falcon's multi-query keeps one, its new decoder architecture
    ``num_kv_heads``), else the config's ``num_key_value_heads``, else one per query head."""
    heads = attention_heads(cfg)
    for module in model.modules():
        groups = getattr(module, "num_key_value_groups", None)
        if isinstance(groups, int) and groups > 0 and hasattr(module, "layer_idx"):
            return heads // groups
    return int(getattr(cfg, "num_key_value_heads", None) or heads)
