"""Where the pieces of a decoder-only transformer live inside a transformers model.

Found from transformers' own structure, not a table per family: the decoder stack is
``get_decoder()`` (or ``base_model``), the layers are its ``nn.ModuleList`` with one entry per
hidden layer, the final norm is the stack's norm-like child, the head is
``get_output_embeddings()``.

A layer's token mixer is not always attention. Each layer's mixer is named from its own modules
(:func:`mixer_kind`): attention (its ``self_attn``/``attn``/``attention``/``self_attention``
child, else a module whose class name ends in ``Attention``), linear attention (gated DeltaNet,
lightning), state-space (Mamba, Mamba2), a short convolution (LFM2), or none. A layer can hold
two side by side (Falcon-H1: attention and Mamba in parallel); its kind names both.

A block can hold several attention sublayers, each its own cache layer (LongCat-Flash: two, its
``num_hidden_layers`` counting them): the records keep one row a block (its residual is what the
block hands on), its attention is its first sublayer's, and its cache row sums its sublayers'
(``Anatomy.sublayers``, ``ModelInfo.sublayers``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from llm_lens.core.errors import ModelLoadError

ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention")
FINAL_NORM_NAMES = (
    "norm", "ln_f", "final_layer_norm", "final_layernorm", "final_norm", "norm_f", "embedding_norm"
)  # fmt: skip
MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn")
POSITION_TABLE_NAMES = ("wpe", "embed_positions", "position_embeddings")
ATTENTION = "attention"
LATENT_ATTENTION = "latent attention"  # caches a compressed latent, not per-head K/V (MLA)
SPARSE = "sparse "  # before an attention kind whose keys an indexer selects (DeepSeek's DSA)
SHARED_KV = "shared-K/V attention"  # reads the K/V another layer keeps, keeps none (Gemma 3n)
STATE_SPACE = "state-space"
LINEAR_ATTENTION = "linear attention"
SHORT_CONV = "short convolution"
NO_MIXER = "none"
# words in a module's class or attribute name that say which kind of token mixer it is; the
# first kind whose words match wins (a gated DeltaNet has Mamba's ``A_log`` but is not Mamba)
MIXER_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (LINEAR_ATTENTION, ("deltanet", "delta", "linear_attn", "linearattention", "lightning")),
    (STATE_SPACE, ("mamba", "ssm", "mixer")),
    (SHORT_CONV, ("shortconv", "short_conv", "conv")),
)


@dataclass
class Anatomy:
    """Where the pieces of a decoder-only transformer live in a transformers model."""

    embed: Any
    layers: list[Any]
    attn: list[Any]  # per layer: its attention module, None where the layer has none
    final_norm: Any
    lm_head: Any
    rotary: Any | None  # the model's rotary embedding module, if any
    decoder: Any = None  # the decoder stack holding embeddings, layers and final norm
    position_table: Any | None = None  # a learned position table (GPT-2's wpe, OPT's), if any
    layer_of: dict[int, int] = field(default_factory=dict)  # id(attention module) -> layer
    # per layer: its token mixer (the attention module, else the Mamba, DeltaNet or convolution
    # module whose output the layer adds to its residual) and what kind it is (``kinds``)
    mixers: list[Any] = field(default_factory=list)
    kinds: tuple[str, ...] = ()
    # per layer: its mixer that is not attention (Mamba, DeltaNet, convolution), or None;
    # Falcon-H1's layers have attention and this side by side
    state_mixers: list[Any | None] = field(default_factory=list)
    # how the residual is laid out (core.streams.Streams: several parallel streams in Gemma 3n,
    # DeepSeek-V4, HY-v4); None until core.streams.streams_of probes it
    streams: Any = None
    # attention sublayers (and cache layers) per block: 1, or 2 in LongCat-Flash, whose block
    # i holds cache layers 2i and 2i + 1; ``attn[i]`` is then the block's first sublayer
    sublayers: int = 1

    def attention_modules(self) -> list[Any]:
        """Every attention module the stack calls: each layer's, and where a block holds several
        sublayers (LongCat-Flash) each of them, so that an edit of every attention misses none."""
        if self.sublayers > 1:
            return [m for layer in self.layers for m in _inner_attention(layer)]
        return [m for m in self.attn if m is not None]

    def has_attention(self, layer: int) -> bool:
        """Does ``layer`` compute attention (and so have attention rows and maps)?"""
        return self.attn[layer] is not None

    @classmethod
    def of(cls, model: Any) -> Anatomy:
        """The anatomy of ``model``; one clear ModelLoadError naming what was not found."""
        name = type(model).__name__
        decoder = _decoder(model)
        layers, per = _layers(model, decoder), 1
        if layers is None:
            layers, per = _sublayer_blocks(model, decoder) or (None, 1)
        if layers is None:
            raise ModelLoadError(f"{name}: cannot find the decoder layers (no list of blocks)")
        attn = [_attention(layer) for layer in layers]
        if per > 1:  # the block's first attention sublayer (its own module, with its layer_idx)
            attn = [_inner_attention(layer)[0] for layer in layers]
        others = [_other_mixer(layer, a) for layer, a in zip(layers, attn, strict=True)]
        missing = [i for i, (a, o) in enumerate(zip(attn, others, strict=True)) if a is o is None]
        if missing:
            raise ModelLoadError(
                f"{name}: cannot find the attention module of layer {missing[0]} "
                "(nor a state-space, linear-attention or convolution mixer)"
            )
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
            layer_of=_layer_of(attn),
            mixers=[a if a is not None else o and o[1] for a, o in zip(attn, others, strict=True)],
            kinds=tuple(_kind(a, o) for a, o in zip(attn, others, strict=True)),
            state_mixers=[o and o[1] for o in others],
            sublayers=per,
        )


def _decoder(model: Any) -> Any:
    """The decoder stack: ``get_decoder()``, else ``base_model``, else the child holding the
    input embeddings (Llama 4 names a prefix it does not use); a candidate that does not hold
    the input embeddings is passed over (ModernBERT's decoder is its head)."""
    get = getattr(model, "get_input_embeddings", None)
    embed = get() if callable(get) else None
    get = getattr(model, "get_decoder", None)
    candidates = [get() if callable(get) else None, getattr(model, "base_model", None)]
    candidates += [c for c in model.children() if any(m is embed for m in c.modules())]
    for decoder in candidates:
        if decoder is None or decoder is model or not isinstance(decoder, torch.nn.Module):
            continue
        if embed is None or any(m is embed for m in decoder.modules()):
            return decoder
    raise ModelLoadError(f"{type(model).__name__}: cannot find the decoder stack")


def _layers(model: Any, decoder: Any) -> Any | None:
    """The first ModuleList of the stack holding one block per hidden layer."""
    cfg = model.config.get_text_config(decoder=True)
    count = getattr(cfg, "num_hidden_layers", None)
    for _name, module in decoder.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) and len(module) == count:
            return module
    return None


def _inner_attention(block: Any) -> list[Any]:
    """The modules inside ``block`` that carry their own cache ``layer_idx``, in order."""
    inner = [m for m in block.modules() if m is not block]
    return [m for m in inner if isinstance(getattr(m, "layer_idx", None), int)]


def _sublayer_blocks(model: Any, decoder: Any) -> tuple[Any, int] | None:
    """A stack whose blocks each hold several attention sublayers (LongCat-Flash: 28 blocks of
    2, its ``num_hidden_layers`` 56 counting the sublayers, the cache one layer a sublayer):
    (the blocks, sublayers per block); None where that is not the case."""
    count = getattr(model.config.get_text_config(decoder=True), "num_hidden_layers", None)
    for _name, blocks in decoder.named_modules():
        if not isinstance(blocks, torch.nn.ModuleList) or not len(blocks) or not count:
            continue
        per, rest = divmod(count, len(blocks))
        if per > 1 and not rest and len(_inner_attention(blocks[0])) == per:
            return blocks, per
    return None


def mixer_kind(name: str, module: Any) -> str | None:
    """The kind of token mixer a layer's child ``name`` is, from its attribute and class names:
    linear attention, state-space or short convolution; None when it is none of those."""
    words = f"{name} {type(module).__name__}".lower()
    for kind, needles in MIXER_WORDS:
        if any(n in words for n in needles):
            return kind
    return None


def _attention(layer: Any) -> Any | None:
    """A layer's (softmax) attention module: a named child, else the first module whose class
    name ends in ``Attention`` (Zamba2 nests its shared one); None for a layer without one."""
    for name in ATTENTION_NAMES:
        module = getattr(layer, name, None)
        if isinstance(module, torch.nn.Module) and _softmax(module):
            return module
    for module in layer.modules():
        if type(module).__name__.endswith("Attention") and _softmax(module):
            return module
    return None


def _softmax(module: Any) -> bool:
    """Is ``module`` softmax attention: no mixer word in its name, or a latent one (Kimi's MLA
    is ``KimiLinearAttention`` beside its ``KimiLinearDeltaAttention``)?"""
    return mixer_kind("", module) is None or latent_elements(module) > 0


def _other_mixer(layer: Any, attention: Any | None) -> tuple[str, Any] | None:
    """A layer's token mixer that is not attention (Mamba, DeltaNet, a short convolution): its
    first child of a mixer kind by attribute or class name."""
    for name, module in layer.named_children():
        if module is attention or isinstance(module, torch.nn.Linear | torch.nn.ModuleList):
            continue
        if "norm" in type(module).__name__.lower():  # Mamba2RMSNorm is a norm, not a mixer
            continue
        kind = mixer_kind(name, module)
        if kind is not None:
            return kind, module
    return None


def _kind(attention: Any | None, other: tuple[str, Any] | None) -> str:
    """The layer's mixer kind: one of the kinds, or two joined by " + " (Falcon-H1)."""
    kinds = []
    if attention is not None:
        base = LATENT_ATTENTION if latent_elements(attention) else ATTENTION
        base = SHARED_KV if shares_kv(attention) else base
        sparse = isinstance(getattr(attention, "indexer", None), torch.nn.Module)
        kinds.append(SPARSE + base if sparse else base)
    if other is not None:
        kinds.append(other[0])
    return " + ".join(kinds) or NO_MIXER


def _layer_of(attn: list[Any | None]) -> dict[int, int]:
    """id(attention module) -> its layer (a module shared by several layers: the first)."""
    out: dict[int, int] = {}
    for i, a in enumerate(attn):
        if a is not None:
            out.setdefault(id(a), i)
    return out


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


def state_elements(mixer: Any | None) -> int:
    """Elements of state one sequence's cache keeps for a non-attention mixer: its causal
    convolution's window (channels × kernel) and its recurrent state, read from the first
    module inside ``mixer`` that owns a ``Conv1d``; 0 for None or a mixer without one."""
    if mixer is None:
        return 0
    for module in mixer.modules():
        conv = next((c for c in module.children() if isinstance(c, torch.nn.Conv1d)), None)
        if conv is not None:
            kernel = int(getattr(module, "conv_kernel_size", None) or conv.kernel_size[0])
            return conv.in_channels * kernel + _recurrent_elements(module)
    return _recurrent_elements(mixer)  # no convolution: a recurrence alone (lightning)


def layer_state_elements(layer: Any, mixer: Any | None) -> int:
    """Elements of state one sequence's cache keeps for a whole layer with a non-attention
    ``mixer``: the mixer's (:func:`state_elements`) and every other causal convolution in the
    layer (Inkling's keys, values and MLP each pass one, beside its attention's); 0 for a layer
    without such a mixer."""
    if mixer is None:
        return 0
    inside = {id(m) for m in mixer.modules()}
    extra = 0
    for module in layer.modules():
        if id(module) in inside:
            continue
        conv = next((c for c in module.children() if isinstance(c, torch.nn.Conv1d)), None)
        if conv is not None:
            kernel = int(getattr(module, "conv_kernel_size", None) or conv.kernel_size[0])
            extra += conv.in_channels * kernel
    return state_elements(mixer) + extra


def _recurrent_elements(module: Any) -> int:
    """The recurrent state: gated DeltaNet's (value heads, key dim, value dim) matrix per head;
    Mamba's (channels, state) where ``A_log`` is that matrix; Mamba2's (heads, head dim,
    state); lightning attention's (head dim × head dim) per head (its decay ``slope_rate``, one
    a head); none for a short convolution (no ``A_log``)."""
    slope, head_dim = getattr(module, "slope_rate", None), getattr(module, "head_dim", None)
    if isinstance(slope, torch.Tensor) and isinstance(head_dim, int):
        return int(slope.numel()) * head_dim * head_dim
    a_log = getattr(module, "A_log", None)
    heads, dim = getattr(module, "num_heads", None), getattr(module, "head_dim", None)
    delta = mixer_kind("", module) == LINEAR_ATTENTION
    if not isinstance(a_log, torch.Tensor) and delta and isinstance(heads, int):
        return heads * int(dim) ** 2 if isinstance(dim, int) else 0  # Kimi's delta rule
    if not isinstance(a_log, torch.Tensor):
        return 0
    k_dim, v_dim = getattr(module, "head_k_dim", None), getattr(module, "head_v_dim", None)
    if isinstance(k_dim, int) and isinstance(v_dim, int):
        return int(getattr(module, "num_v_heads", a_log.numel())) * k_dim * v_dim
    if a_log.dim() == 2:
        return int(a_log.numel())
    return int(a_log.numel()) * int(module.head_dim) * int(module.ssm_state_size)


def model_wide(cfg: Any, name: str) -> Any:
    """``cfg.name``, or None where absent. A config whose layers differ (Gemma 4's head size)
    refuses the model-wide value unless asked knowingly: the per-layer values are read from
    each layer's own modules (``ModelInfo.layer_head_dims``), this one is only the default."""
    try:
        return getattr(cfg, name, None)
    except Exception:  # transformers' AmbiguousGlobalPerLayerAttributeError
        flag = "allow_global_per_layer_attribute_access"
        before = cfg.__dict__.get(flag, False)
        cfg.__dict__[flag] = True
        try:
            return getattr(cfg, name, None)
        finally:
            cfg.__dict__[flag] = before


def shares_kv(attention: Any | None) -> bool:
    """Does this attention read the keys and values another layer computed and kept (Gemma 3n's
    and Gemma 4's last layers: ``is_kv_shared_layer``), keeping none of its own?"""
    return getattr(attention, "is_kv_shared_layer", False) is True


def kv_heads_of(attention: Any | None, heads: int, default: int) -> int:
    """The K/V heads one attention module caches: its own ``num_key_value_heads`` (JetMoE's
    mixture of attention heads), else its ``heads // num_key_value_groups`` (MiMo's full and
    sliding layers differ), else ``default``; 0 for a layer without attention or one that
    reads another layer's K/V."""
    if attention is None or shares_kv(attention):
        return 0
    own = getattr(attention, "num_key_value_heads", None)
    if isinstance(own, int) and own > 0:
        return own
    groups = getattr(attention, "num_key_value_groups", None)
    if isinstance(groups, int) and groups > 0:
        return int(getattr(attention, "num_heads", None) or heads) // groups
    return default


def query_heads_of(attention: Any | None, default: int) -> int:
    """The query heads one attention module has: its own ``num_heads`` (Inkling's sliding
    layers have ``swa_num_attention_heads``), else ``num_attention_heads``, else ``default``;
    0 for a layer without attention."""
    if attention is None:
        return 0
    for name in ("num_heads", "num_attention_heads"):
        value = getattr(attention, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def latent_elements(attention: Any | None) -> int:
    """Elements per token a latent-attention layer (DeepSeek's MLA) caches: its compressed
    ``kv_lora_rank`` latent and its ``qk_rope_head_dim`` rotary key, shared by every head;
    0 for per-head K/V attention."""
    rank = getattr(attention, "kv_lora_rank", None)
    if not isinstance(rank, int) or rank <= 0:
        return 0
    return rank + int(getattr(attention, "qk_rope_head_dim", 0) or 0)


def find_mlp(anatomy: Anatomy, layer: int) -> Any | None:
    """Layer ``layer``'s MLP (or MoE block): its mlp/feed_forward/… child, else the child whose
    class name ends in MLP or MoE, else (OPT keeps fc1 and fc2 in the layer itself) the last
    child with a weight that is not a norm: the MLP's output projection; None (a pure Mamba
    layer) when there is none."""
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
    return weighted[-1] if weighted else None
