"""Where the pieces of a decoder-only transformer live inside a transformers model.

Found from transformers' own structure, not a table per family: the decoder stack is
``get_decoder()`` (or ``base_model``), the layers are its ``nn.ModuleList`` with one entry per
hidden layer, each layer's attention is its ``self_attn``/``attn``/``attention``/``self_attention``
child (else the child whose class name ends in ``Attention``), the final norm is the stack's
norm-like child, the head is ``get_output_embeddings()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from llm_lens.core.errors import ModelLoadError

ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention")
FINAL_NORM_NAMES = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "final_norm")
POSITION_TABLE_NAMES = ("wpe", "embed_positions", "position_embeddings")


@dataclass
class Anatomy:
    """Where the pieces of a decoder-only transformer live in a transformers model."""

    embed: Any
    layers: list[Any]
    attn: list[Any]
    final_norm: Any
    lm_head: Any
    rotary: Any | None  # the model's rotary embedding module, if any
    decoder: Any = None  # the decoder stack holding embeddings, layers and final norm
    position_table: Any | None = None  # a learned position table (GPT-2's wpe, OPT's), if any
    layer_of: dict[int, int] = field(default_factory=dict)  # id(attention module) -> layer

    @classmethod
    def of(cls, model: Any) -> Anatomy:
        """The anatomy of ``model``; one clear ModelLoadError naming what was not found."""
        name = type(model).__name__
        decoder = _decoder(model)
        layers = _layers(model, decoder)
        if layers is None:
            raise ModelLoadError(f"{name}: cannot find the decoder layers (no list of blocks)")
        attn = [_attention(layer) for layer in layers]
        missing = [i for i, a in enumerate(attn) if a is None]
        if missing:
            raise ModelLoadError(f"{name}: cannot find the attention module of layer {missing[0]}")
        head = model.get_output_embeddings()
        if head is None:
            raise ModelLoadError(f"{name}: has no output embeddings (not a causal LM head)")
        return cls(
            embed=model.get_input_embeddings(),
            layers=list(layers),
            attn=attn,
            final_norm=_child(decoder, FINAL_NORM_NAMES) or torch.nn.Identity(),
            lm_head=head,
            rotary=_rotary(decoder),
            decoder=decoder,
            position_table=_child(decoder, POSITION_TABLE_NAMES),
            layer_of={id(a): i for i, a in enumerate(attn)},
        )


def _decoder(model: Any) -> Any:
    get = getattr(model, "get_decoder", None)
    decoder = get() if callable(get) else None
    if decoder is None or decoder is model:
        decoder = getattr(model, "base_model", None)
    if decoder is None or decoder is model:
        raise ModelLoadError(f"{type(model).__name__}: cannot find the decoder stack")
    return decoder


def _layers(model: Any, decoder: Any) -> Any | None:
    """The first ModuleList of the stack holding one block per hidden layer."""
    cfg = model.config.get_text_config(decoder=True)
    count = getattr(cfg, "num_hidden_layers", None)
    for _name, module in decoder.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) and len(module) == count:
            return module
    return None


def _attention(layer: Any) -> Any | None:
    for name in ATTENTION_NAMES:
        module = getattr(layer, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    for module in layer.children():
        if type(module).__name__.endswith("Attention"):
            return module
    return None


def _child(decoder: Any, names: tuple[str, ...]) -> Any | None:
    for name in names:
        module = getattr(decoder, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    return None


def _rotary(decoder: Any) -> Any | None:
    rotary = getattr(decoder, "rotary_emb", None)
    if rotary is not None:
        return rotary
    for module in decoder.children():
        if "Rotary" in type(module).__name__:
            return module
    return None
