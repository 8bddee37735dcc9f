"""Where each intervention acts, found in the model's own modules through :class:`Anatomy`.

The attention block's output projection (the module whose input is the heads' outputs side by
side), a layer's MLP, the MoE routers, and the sizes a SPEC is checked against. Found by the
names transformers' families use, then by shape, never by a table of model classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from llm_lens.core.anatomy import Anatomy, query_heads_of
from llm_lens.core.experts import find_routers
from llm_lens.core.interventions.spec import InterventionError

OUT_PROJ_NAMES = ("o_proj", "c_proj", "dense", "out_proj", "o")
MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn")


@dataclass(frozen=True)
class Sizes:
    """What a SPEC is checked against: layers, heads, residual width, experts per MoE layer."""

    layers: int
    heads: int
    hidden: int
    experts: dict[int, int]  # MoE layer -> its number of experts
    # per layer, its attention's own query heads where layers differ (Inkling); empty: ``heads``
    layer_heads: tuple[int, ...] = ()

    def heads_in(self, layer: int) -> int:
        """``layer``'s query heads: its own where layers differ, else ``heads``."""
        return self.layer_heads[layer] if layer < len(self.layer_heads) else self.heads

    @classmethod
    def of(cls, model: Any, anatomy: Anatomy) -> Sizes:
        cfg = model.config.get_text_config(decoder=True)
        experts = {layer: _expert_count(router) for layer, router in find_routers(model)}
        heads = int(cfg.num_attention_heads)
        own = tuple(query_heads_of(a, heads) for a in anatomy.attn)
        differ = any(h not in (0, heads) for h in own)
        return cls(len(anatomy.layers), heads, int(cfg.hidden_size), experts, own if differ else ())


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
