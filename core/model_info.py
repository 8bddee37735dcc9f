"""What a loaded model is: its shapes, per-layer kinds and where it runs, as one frozen record.

:func:`llm_lens.core.describe.describe` builds a :class:`ModelInfo` from the model's config and
modules; every stage, card and engine reads the model's shape from it, and a session file keeps
it (:meth:`ModelInfo.as_dict`). :mod:`llm_lens.core.records` names it too, beside the records
that carry it across threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def head_sharing(num_heads: int, num_kv_heads: int) -> str:
    """How the query heads share keys and values: "MHA" (each its own), "MQA" (one K/V head for
    all) or "GQA n:m" (n query heads over m KV heads)."""
    if num_kv_heads >= num_heads:
        return "MHA"
    if num_kv_heads == 1:
        return "MQA"
    return f"GQA {num_heads}:{num_kv_heads}"


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is: shapes from its config, where it runs, what it was loaded from."""

    name: str
    source: str
    architecture: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    context_length: int
    dtype: str
    device: str
    num_parameters: int
    position_kind: str  # "rope", "learned", "alibi" or "none"
    rope_theta: float | None
    weights_id: str  # identity of the weights file(s): a hash of their bytes
    attention_note: str = ""  # why this family has no attention maps; empty when it has them
    # per layer, its token mixer (core.anatomy's kinds: "attention", "state-space", "linear
    # attention", "short convolution", "attention + state-space", "none"); empty when unknown.
    # A layer whose kind has no "attention" in it has no attention rows (they stay zero).
    layer_kinds: tuple[str, ...] = ()
    # per layer, its attention's head size (0: no attention; Zamba2's shared block differs from
    # the config's) and the elements of constant conv/recurrent state its cache keeps per
    # sequence (core.kvcache.state); empty when unknown (then every layer: head_dim, no state)
    layer_head_dims: tuple[int, ...] = ()
    state_elements: tuple[int, ...] = ()
    # per layer, the elements per token a latent-attention layer caches in place of per-head
    # K/V (DeepSeek's MLA: its latent and rotary key); 0 elsewhere; empty when none has one
    latent_dims: tuple[int, ...] = ()
    # what is random in a model loaded with --allow-partly-random (weights missing from its
    # files, of another shape); empty when every weight came from the files
    partly_random: str = ""
    # a model spread by accelerate's device map (core.placement): per placed piece, (module
    # name, where its weights sit: "cuda:0", "cpu" or "disk", bytes); empty on one device
    placement: tuple[tuple[str, str, int], ...] = ()
    # quantized weights (core.quantize): e.g. "int8 weights (quanto): the numbers of this model
    # as quantized"; empty for the model's own full-precision weights
    quantization: str = ""
    # per layer, the K/V heads its attention caches (0: none; JetMoE's and MiMo's differ from
    # the model-wide ``num_kv_heads``); empty when unknown (then every layer: num_kv_heads)
    layer_kv_heads: tuple[int, ...] = ()
    # per layer, whether it has an MLP (or MoE block) an intervention can scale (a pure Mamba
    # layer has none); empty when unknown (then every layer has one)
    layer_mlps: tuple[bool, ...] = ()
    # per layer, its attention's query heads where layers differ (Inkling's sliding layers have
    # their own count; 0: no attention); empty when every layer has ``num_heads``, which is
    # then the widest layer's count (every per-head array is that wide)
    layer_heads: tuple[int, ...] = ()
    # per layer, tensors a token's K/V takes (2; 1 where one vector is key and value:
    # DeepSeek-V4) and its attention's compressors, (rate, width, entry size, gate bias bytes)
    # (core.kvcache.compressed); empty when no layer differs from 2 / has none
    layer_kv_copies: tuple[int, ...] = ()
    layer_compressors: tuple[tuple[tuple[int, int, int, int], ...], ...] = ()

    def heads_in(self, layer: int) -> int:
        """The query heads of ``layer``'s attention (``num_heads`` where layers do not differ);
        the heads past it in a per-head array stay zero (a count that is not a whole number up
        to ``num_heads``, as a hand-edited session file could hold, reads as ``num_heads``)."""
        own = self.layer_heads[layer] if 0 <= layer < len(self.layer_heads) else None
        if isinstance(own, int) and not isinstance(own, bool) and 0 <= own <= self.num_heads:
            return own
        return self.num_heads

    def kv_heads_in(self, layer: int) -> int:
        """The K/V heads ``layer``'s attention keeps (``num_kv_heads`` where layers do not
        differ or ``layer`` keeps none of its own)."""
        own = self.layer_kv_heads[layer] if 0 <= layer < len(self.layer_kv_heads) else 0
        if isinstance(own, int) and not isinstance(own, bool) and own > 0:
            return own
        return self.num_kv_heads

    # where the residual is several parallel streams (Gemma 3n, DeepSeek-V4, HY-v4): the one
    # line saying that each layer's residual shown is what the model's own tail reads (the
    # vector it collapses them into before its final norm); empty for one stream
    residual_note: str = ""
    residual_streams: int = 1  # their count (a residual row: hidden, or streams × hidden)
    # attention sublayers a layer (block) holds, each its own cache layer: 1, or 2 in
    # LongCat-Flash (block i's cache layers are 2i and 2i + 1, its records one row)
    sublayers: int = 1

    def has_attention(self, layer: int) -> bool:
        """Does ``layer`` compute attention (rows and maps)? True where the kinds are unknown."""
        kinds = self.layer_kinds
        parts = kinds[layer].split(" + ") if layer < len(kinds) else ["attention"]
        return not kinds or any(p.endswith("attention") and p != "linear attention" for p in parts)

    @property
    def head_sharing(self) -> str:
        """ "MHA", "MQA" or "GQA n:m" (query heads : KV heads), from the config's head counts."""
        return head_sharing(self.num_heads, self.num_kv_heads)

    @property
    def gqa_groups(self) -> tuple[tuple[int, ...], ...]:
        """For each KV head, the query heads that share it."""
        per = self.num_heads // self.num_kv_heads
        return tuple(tuple(range(k * per, (k + 1) * per)) for k in range(self.num_kv_heads))

    def gqa_groups_in(self, layer: int) -> tuple[tuple[int, ...], ...]:
        """``gqa_groups`` of ``layer``'s own query and K/V heads (MiMo's and Inkling's layers
        differ); the model-wide groups where layers do not."""
        if not (self.layer_heads or self.layer_kv_heads):
            return self.gqa_groups
        heads, kv = self.heads_in(layer), self.kv_heads_in(layer)
        if not heads or heads % kv:
            return self.gqa_groups
        per = heads // kv
        return tuple(tuple(range(k * per, (k + 1) * per)) for k in range(kv))

    @property
    def dtype_bytes(self) -> int:
        return 2 if self.dtype in ("bfloat16", "float16") else 4

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON holds them (the per-layer tuples as lists)."""
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k in self.__dataclass_fields__
            for v in (getattr(self, k),)
        }
