"""The KV-cache size formula: what a layout holds per token and after N tokens.

The cache, not the weights, is what grows with context: every token keeps one key and one value
vector per layer per KV head. Layers with a sliding window (Mistral, Gemma 2/3's local layers,
Qwen2 with ``use_sliding_window``) hold only the last ``window - 1`` tokens in transformers'
``DynamicCache``, so at N tokens each layer is counted with what it holds: ``min(N, window - 1)``
or N. :class:`KVLayout` is the formula from a config (:mod:`.config`); :func:`formula_bytes` the
same from a loaded model's :class:`~llm_lens.core.records.ModelInfo`, beside what :mod:`.measure`
finds in its cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llm_lens.core.errors import LensError
from llm_lens.core.records import ModelInfo


class ConfigError(LensError, ValueError):
    """A config (or a request about one) that cannot be read; the message names what is wrong."""


MAX_COUNT = 2**53  # larger counts are no model's (and overflow a float in the report)
MAX_CONFIG_BYTES = 64 << 20  # a config.json is kilobytes; refuse to read a huge or endless file


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {_show(value)}")
    if value > MAX_COUNT:
        raise ConfigError(f"{name} must be at most 2**53, got {_show(value)}")


def _show(value: Any) -> str:
    text = (
        repr(value)
        if not isinstance(value, int) or value < 10**30
        else f"a {len(str(value))}-digit number"
    )
    return text if len(text) <= 60 else text[:59] + "…"


@dataclass(frozen=True)
class KVLayout:
    """The shape of one model's KV cache: what is stored per token, per layer."""

    family: str
    num_layers: int
    num_heads: int  # query heads
    num_kv_heads: int  # KV heads actually cached: 1 for MQA, num_heads for MHA
    head_dim: int
    context_length: int | None
    windows: tuple[int, ...] = ()  # per layer: its sliding window, 0 for full attention
    # per layer: True where it holds no K/V (a Mamba, DeltaNet, convolution or MLP-only layer)
    kv_free: tuple[bool, ...] = ()
    # latent attention (MLA): elements a token costs a layer in place of per-head K/V (its
    # latent and rotary key), and what per-head K/V of every query head would cost instead
    latent_dim: int = 0
    latent_mha_dim: int = 0
    # per layer, its own head size where layers differ (Gemma 4's ``per_layer_config``); empty:
    # every layer ``head_dim``
    layer_head_dims: tuple[int, ...] = ()
    # per layer, its own K/V heads where layers differ (MiMo's sliding layers keep twice its
    # full layers', as its attention module builds them); empty: every layer ``num_kv_heads``
    layer_kv_heads: tuple[int, ...] = ()
    # per layer, tensors a token's K/V takes where some layer keeps one vector as key and
    # value (DeepSeek-V4), and its compressors (:mod:`.compressed`); empty: 2 each, none
    layer_kv_copies: tuple[int, ...] = ()
    compressors: tuple[tuple[tuple[int, int, int, int], ...], ...] = ()

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "num_kv_heads", "head_dim"):
            _check_positive(name, getattr(self, name))
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"num_kv_heads {self.num_kv_heads} does not divide num_heads {self.num_heads}"
            )
        if not self.windows:
            object.__setattr__(self, "windows", (0,) * self.num_layers)
        if len(self.windows) != self.num_layers:
            raise ConfigError(
                f"{len(self.windows)} layer types for {self.num_layers} layers in the config"
            )
        if not self.kv_free:
            object.__setattr__(self, "kv_free", (False,) * self.num_layers)

    @property
    def kv_layers(self) -> int:
        """Layers that hold K/V (or a latent) for every token."""
        return self.num_layers - sum(self.kv_free)

    @property
    def sliding_layers(self) -> int:
        return sum(1 for w in self.windows if w > 0)

    def held_tokens(self, tokens: int) -> tuple[int, ...]:
        """Tokens each layer holds after `tokens`: all, or the last window − 1 (transformers'
        ``DynamicSlidingWindowLayer``)."""
        return tuple(tokens if w <= 0 else min(tokens, w - 1) for w in self.windows)

    def bytes_per_token(self, dtype_bytes: int, batch: int = 1) -> int:
        """Bytes one token adds to a full-attention cache: a key and a value per layer per KV
        head (a windowed layer stops adding once its window is full)."""
        return self._bytes(self.num_kv_heads, dtype_bytes, batch, latent=True)

    def total_bytes(self, tokens: int, dtype_bytes: int, batch: int = 1) -> int:
        """Bytes the cache holds after `tokens` tokens of each of `batch` sequences."""
        return self._held_bytes(self.num_kv_heads, tokens, dtype_bytes, batch, latent=True)

    def mha_total_bytes(self, tokens: int, dtype_bytes: int, batch: int = 1) -> int:
        """`total_bytes` if every query head kept its own K/V."""
        return self._held_bytes(self.num_heads, tokens, dtype_bytes, batch)

    def _held_bytes(
        self, kv_heads: int, tokens: int, dtype_bytes: int, batch: int, latent: bool = False
    ) -> int:
        _check_positive("tokens", tokens)
        per_token = self._per_layer(kv_heads, dtype_bytes, batch, latent)
        held = sum(n * h for n, h in zip(per_token, self.held_tokens(tokens), strict=True))
        return held + (self.compressed_bytes(tokens, dtype_bytes, batch) if latent else 0)

    def compressed_bytes(self, tokens: int, dtype_bytes: int, batch: int = 1) -> int:
        """What the layers' compressors hold after ``tokens`` (DeepSeek-V4; 0 elsewhere)."""
        from llm_lens.core.kvcache.compressed import compressors_bytes

        return sum(compressors_bytes(c, tokens, dtype_bytes) for c in self.compressors) * batch

    def mha_bytes_per_token(self, dtype_bytes: int, batch: int = 1) -> int:
        """What a token would cost if every query head kept its own K/V (no GQA/MQA saving)."""
        return self._bytes(self.num_heads, dtype_bytes, batch)

    def _bytes(self, kv_heads: int, dtype_bytes: int, batch: int, latent: bool = False) -> int:
        """One token's bytes over the K/V layers; ``latent``: a latent layer's own latent
        (else what per-head K/V of ``kv_heads`` would cost it)."""
        return sum(self._per_layer(kv_heads, dtype_bytes, batch, latent))

    def _per_layer(self, kv_heads: int, dtype_bytes: int, batch: int, latent: bool) -> list[int]:
        """Per layer, the bytes one token adds to it (0 for a layer without K/V): its latent,
        or a key and a value of each of its K/V heads (``layer_kv_heads`` where the layout's
        own count is asked for and layers differ; else ``kv_heads``) at its head size."""
        _check_positive("dtype_bytes", dtype_bytes)
        _check_positive("batch", batch)
        n = self.num_layers
        dims = self.layer_head_dims or (self.head_dim,) * n
        own = self.layer_kv_heads if latent and self.layer_kv_heads else (kv_heads,) * n
        copies = self.layer_kv_copies if latent and self.layer_kv_copies else (2,) * n
        return [
            0
            if free
            else (
                (self.latent_dim if latent else self.latent_mha_dim)
                if self.latent_dim
                else c * heads * dim
            )
            * dtype_bytes
            * batch
            for dim, heads, c, free in zip(dims, own, copies, self.kv_free, strict=True)
        ]


def held_tokens(seen: int, window: int) -> int:
    """Tokens a layer holds after the model has seen ``seen``: all, or the last window − 1."""
    return seen if window <= 0 else min(seen, window - 1)


def formula_bytes(
    info: ModelInfo, tokens: int, num_heads: int | None = None, windows: Sequence[int] = ()
) -> int:
    """Σ over attention layers of 2 × kv_heads × head_dim × bytes × tokens held (``num_heads``
    overrides kv_heads; a layer with a window > 0 holds at most window − 1 tokens; a layer's own
    head size where ``info.layer_head_dims`` lists it, none for a layer without attention, the
    latent once per token for a latent-attention layer, ``info.latent_dims``; ``num_heads``
    is each layer's own query heads where ``info.layer_heads`` lists them: Inkling's; one
    vector, not two, where a layer's key is its value, ``info.layer_kv_copies``)."""
    kv = info.layer_kv_heads or (info.num_kv_heads,) * info.num_layers
    if num_heads is not None and info.layer_heads:
        kv, num_heads = info.layer_heads, 0  # per head K/V of each layer's own query heads
    dims = info.layer_head_dims or (info.head_dim,) * info.num_layers
    latent = info.latent_dims or (0,) * info.num_layers
    windows = tuple(windows) or (0,) * info.num_layers
    copies = info.layer_kv_copies if num_heads is None and info.layer_kv_copies else (2,) * len(kv)
    per = int(getattr(info, "sublayers", 1) or 1)  # LongCat-Flash: K/V of each sublayer
    per_token = [
        lat if lat and num_heads is None else c * (num_heads or heads) * dim * per
        for dim, lat, heads, c in zip(dims, latent, kv, copies, strict=False)
    ]  # a latent layer: its latents once (``num_heads``: what per-head K/V would hold)
    return sum(
        n * info.dtype_bytes * held_tokens(tokens, w)
        for n, w in zip(per_token, windows, strict=False)
    )


def per_layer_terms(info: ModelInfo, tokens: int, windows: Sequence[int] = ()) -> str:
    """The formula's numbers as one term a kind of layer, "1 × 2 × 2 × 8 × 4 × 9 + …", where
    attention layers differ in K/V heads or head size (MiMo, Inkling, Gemma 4), so that one
    product of model-wide numbers would not add up; "" where one product says it (or a layer
    caches a latent)."""
    n = info.num_layers
    heads = info.layer_kv_heads or (info.num_kv_heads,) * n
    dims = info.layer_head_dims or (info.head_dim,) * n
    kinds = {(k, d) for k, d in zip(heads, dims, strict=False) if k and d}
    if any(info.latent_dims) or len(kinds) <= 1:
        return ""
    groups: dict[tuple[int, int, int], int] = {}
    for k, d, w in zip(heads, dims, tuple(windows) or (0,) * n, strict=False):
        if k and d:
            key = (k, d, held_tokens(tokens, w))
            groups[key] = groups.get(key, 0) + 1
    b = info.dtype_bytes
    return " + ".join(f"{c} × 2 × {k} × {d} × {b} × {h}" for (k, d, h), c in groups.items())


def compressed_formula_bytes(info: ModelInfo, tokens: int, batch: int = 1) -> int:
    """What the layers' compressors hold after ``tokens`` (DeepSeek-V4: waiting tokens,
    compressed entries, the overlap series), from ``info.layer_compressors``."""
    from llm_lens.core.kvcache.compressed import compressors_bytes

    found = sum(compressors_bytes(c, tokens, info.dtype_bytes) for c in info.layer_compressors)
    return found * batch


def state_formula_bytes(info: ModelInfo, batch: int = 1) -> int:
    """The constant conv and recurrent state of the non-attention layers, from
    ``info.state_elements`` (:func:`llm_lens.core.kvcache.state.state_elements`)."""
    return sum(info.state_elements) * info.dtype_bytes * batch
