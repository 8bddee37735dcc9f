"""Where each intervention acts, found in the model's own modules through :class:`Anatomy`.

The attention block's output projection (the module whose input is the heads' outputs side by
side), a layer's MLP, the MoE routers, and the sizes a SPEC is checked against. Found by the
names transformers' families use, then by shape, never by a table of model classes. Where the
residual is several parallel streams (:mod:`llm_lens.core.streams`), where in them a residual
row goes (:func:`stream_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.experts import find_routers
from llm_lens.core.interventions.spec import InterventionError
from llm_lens.core.streams import Streams, streams_of

OUT_PROJ_NAMES = ("o_proj", "c_proj", "dense", "out_proj", "o")
MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn")


@dataclass(frozen=True)
class Sizes:
    """What a SPEC is checked against: layers, heads, residual width, experts per MoE layer,
    and the residual's parallel streams (a residual row is ``hidden`` numbers, for every
    stream, or ``hidden × streams``, each stream its own: :func:`stream_rows`)."""

    layers: int
    heads: int
    hidden: int
    experts: dict[int, int]  # MoE layer -> its number of experts
    streams: int = 1

    @classmethod
    def of(cls, model: Any, anatomy: Anatomy) -> Sizes:
        cfg = model.config.get_text_config(decoder=True)
        experts = {layer: _expert_count(router) for layer, router in find_routers(model)}
        heads, hidden = int(cfg.num_attention_heads), int(cfg.hidden_size)
        return cls(len(anatomy.layers), heads, hidden, experts, streams_of(anatomy).count)

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
    attn = anatomy.attn[layer]
    for name in OUT_PROJ_NAMES:
        module = getattr(attn, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    weighted = [m for m in attn.children() if isinstance(getattr(m, "weight", None), torch.Tensor)]
    if not weighted:
        raise InterventionError(f"layer {layer}'s attention has no output projection to hook")
    return weighted[-1]


def mlp_of(anatomy: Anatomy, layer: int) -> Any:
    """Layer ``layer``'s MLP (or MoE block): its mlp/feed_forward/… child, else the child whose
    class name ends in MLP or MoE, else (OPT keeps fc1 and fc2 in the layer itself) the last
    child with a weight that is not a norm: the MLP's output projection."""
    block = anatomy.layers[layer]
    for name in MLP_NAMES:
        module = getattr(block, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    for module in block.children():
        if type(module).__name__.lower().endswith(("mlp", "moe", "sparsemoeblock")):
            return module
    weighted = [
        module
        for name, module in block.named_children()
        if isinstance(getattr(module, "weight", None), torch.Tensor)
        and "norm" not in name.lower()
        and "norm" not in type(module).__name__.lower()
        and module is not anatomy.attn[layer]
    ]
    if not weighted:
        raise InterventionError(f"layer {layer} has no MLP to hook")
    return weighted[-1]


def router_of(model: Any, layer: int) -> Any:
    """The MoE router of decoder layer ``layer`` (:func:`~llm_lens.core.experts.find_routers`)."""
    for index, router in find_routers(model):
        if index == layer:
            return router
    raise InterventionError(f"layer {layer} has no mixture-of-experts router")
