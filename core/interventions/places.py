"""Where each intervention acts, found in the model's own modules through :class:`Anatomy`.

The attention block's output projection (the module whose input is the heads' outputs side by
side), a layer's attention, MLP or other token mixer, the MoE routers, and the sizes a SPEC is
checked against. Found by the names transformers' families use, then by shape, never by a table
of model classes. Where the residual is several parallel streams (:mod:`llm_lens.core.streams`),
where in them a residual row goes (:func:`stream_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from llm_lens.core.anatomy import Anatomy, find_mlp, query_heads_of
from llm_lens.core.experts import find_routers
from llm_lens.core.interventions.spec import InterventionError
from llm_lens.core.streams import Streams, streams_of

OUT_PROJ_NAMES = ("o_proj", "c_proj", "dense", "out_proj", "o")


@dataclass(frozen=True)
class Sizes:
    """What a SPEC is checked against: layers, heads, residual width, experts per MoE layer,
    and the residual's parallel streams (a residual row is ``hidden`` numbers, for every
    stream, or ``hidden × streams``, each stream its own: :func:`stream_rows`)."""

    layers: int
    heads: int
    hidden: int
    experts: dict[int, int]  # MoE layer -> its number of experts
    # per layer, its attention's own query heads where layers differ (Inkling); empty: ``heads``
    layer_heads: tuple[int, ...] = ()
    streams: int = 1

    def heads_in(self, layer: int) -> int:
        """``layer``'s query heads: its own where layers differ, else ``heads``."""
        return self.layer_heads[layer] if layer < len(self.layer_heads) else self.heads

    @classmethod
    def of(cls, model: Any, anatomy: Anatomy) -> Sizes:
        cfg = model.config.get_text_config(decoder=True)
        experts = {layer: _expert_count(router) for layer, router in find_routers(model)}
        heads = int(getattr(cfg, "num_attention_heads", None) or 1)  # Mamba's config has none
        own = tuple(query_heads_of(a, heads) for a in anatomy.attn)
        differ = any(h not in (0, heads) for h in own)
        return cls(
            len(anatomy.layers),
            heads,
            int(cfg.hidden_size),
            experts,
            layer_heads=own if differ else (),
            streams=streams_of(anatomy).count,
        )

    @property
    def row_widths(self) -> tuple[int, ...]:
        """The lengths a residual row may have (one, where the residual is one stream)."""
        return tuple(dict.fromkeys((self.hidden, self.hidden * self.streams)))


def positions_of(h: Any, layout: Streams) -> Any:
    """A layer's input ``h`` as one row per position of its first sequence: (T, hidden), or,
    where the residual is several streams, (T, streams × hidden), the streams in the model's
    order (what a patch from another prompt puts back, each stream its own)."""
    if not layout.several:
        return h[0]
    stack = h.movedim(layout.axis, 0)[:, 0]  # (streams, T, hidden)
    return stack.transpose(0, 1).reshape(stack.shape[1], -1)


def stream_rows(h: Any, item: Any, offset: int, layout: Streams) -> Any:
    """``h``, a stack of ``layout.count`` streams at positions ``offset``…, with a ResidualAdd
    or ResidualPatch applied at the positions this pass holds: a ``hidden``-long row goes into
    every stream (the model writes each block's output into all of them), a ``streams ×
    hidden``-long one into each stream its own part."""
    from llm_lens.core.interventions.spec import ResidualAdd

    out = h.clone()
    view = out.movedim(layout.axis, 0)  # (streams, batch, seq, hidden), a view of ``out``
    seq, width = view.shape[2], view.shape[3]
    if isinstance(item, ResidualAdd):
        rows = list(range(seq)) if not item.positions else _held(item.positions, offset, seq)
        vector = torch.tensor(item.vector, dtype=h.dtype, device=h.device).reshape(-1, width)
        if rows:
            view[:, :, rows] += vector[:, None, None, :]  # (1 or streams, 1, 1, hidden)
        return out if rows else h
    picked = [(p - offset, i) for i, p in enumerate(item.positions) if 0 <= p - offset < seq]
    if not picked:
        return h
    values = torch.tensor(item.values, dtype=h.dtype, device=h.device)  # (positions, width)
    chosen = values[[i for _, i in picked]].reshape(len(picked), -1, width).transpose(0, 1)
    view[:, :, [r for r, _ in picked]] = chosen[:, None]  # (1 or streams, 1, n, hidden)
    return out


def _held(positions: tuple[int, ...], offset: int, seq: int) -> list[int]:
    return [p - offset for p in positions if 0 <= p - offset < seq]


def _expert_count(router: Any) -> int:
    weight = getattr(router, "weight", None)
    if isinstance(weight, torch.Tensor):
        return int(weight.shape[0])
    return int(getattr(router, "num_experts", 0))


def out_projection(anatomy: Anatomy, layer: int) -> Any:
    """Layer ``layer``'s attention output projection: o_proj, c_proj (GPT-2), dense (NeoX,
    Falcon), out_proj (OPT), else the attention block's last child with a weight."""
    attn = attention_of(anatomy, layer)
    for name in OUT_PROJ_NAMES:
        module = getattr(attn, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    weighted = [m for m in attn.children() if isinstance(getattr(m, "weight", None), torch.Tensor)]
    if not weighted:
        raise InterventionError(f"layer {layer}'s attention has no output projection to hook")
    return weighted[-1]


def attention_of(anatomy: Anatomy, layer: int) -> Any:
    """Layer ``layer``'s attention module; a layer without one (a Mamba, DeltaNet or
    convolution layer) is an :class:`InterventionError` naming what it has instead."""
    attn = anatomy.attn[layer]
    if attn is None:
        kind = anatomy.kinds[layer] if layer < len(anatomy.kinds) else "not attention"
        raise InterventionError(f"layer {layer} has no attention (its mixer: {kind})")
    return attn


def mixer_of(anatomy: Anatomy, layer: int) -> Any:
    """Layer ``layer``'s token mixer that is not attention (Mamba, DeltaNet, a short
    convolution: ``Anatomy.state_mixers``); an attention-only layer has none."""
    mixers = anatomy.state_mixers
    mixer = mixers[layer] if layer < len(mixers) else None
    if mixer is None:
        raise InterventionError(f"layer {layer} has no mixer besides attention (use attn:)")
    return mixer


def block_of(anatomy: Anatomy, layer: int, part: str) -> Any:
    """The module a :class:`~llm_lens.core.interventions.spec.BlockEdit` of ``part`` scales."""
    if part == "attn":
        return attention_of(anatomy, layer)
    return mixer_of(anatomy, layer) if part == "mixer" else mlp_of(anatomy, layer)


def mlp_of(anatomy: Anatomy, layer: int) -> Any:
    """Layer ``layer``'s MLP (or MoE block, :func:`~llm_lens.core.anatomy.find_mlp`); a layer
    without one (a pure Mamba layer) is an :class:`InterventionError`."""
    module = find_mlp(anatomy, layer)
    if module is None:
        raise InterventionError(f"layer {layer} has no MLP to hook")
    return module


def router_of(model: Any, layer: int) -> Any:
    """The MoE router of decoder layer ``layer`` (:func:`~llm_lens.core.experts.find_routers`)."""
    for index, router in find_routers(model):
        if index == layer:
            return router
    raise InterventionError(f"layer {layer} has no mixture-of-experts router")
