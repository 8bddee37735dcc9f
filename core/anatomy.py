"""Where the pieces of a decoder-only transformer live inside a transformers model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Anatomy:
    """Where the pieces of a decoder-only transformer live in a transformers model."""

    embed: Any
    layers: list[Any]
    attn: list[Any]
    final_norm: Any
    lm_head: Any
    rotary: Any | None  # the model's rotary embedding module, if any

    @classmethod
    def of(cls, model: Any) -> Anatomy:
        base = getattr(model, "model", None) or getattr(model, "transformer", None)
        if base is None:
            raise ValueError(f"{type(model).__name__}: cannot find the decoder stack")
        layers: Any = getattr(base, "layers", None) or getattr(base, "h", None)
        if layers is None:
            raise ValueError(f"{type(model).__name__}: cannot find the decoder layers")
        norm = getattr(base, "norm", None) or getattr(base, "ln_f", None) or torch.nn.Identity()
        attn = [getattr(layer, "self_attn", None) or layer.attn for layer in layers]
        return cls(
            model.get_input_embeddings(),
            list(layers),
            attn,
            norm,
            model.get_output_embeddings(),
            getattr(base, "rotary_emb", None),
        )
