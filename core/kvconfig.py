"""KV-cache size of a model from its config.json alone, without loading any weights.

The cache, not the weights, is what grows with context: every generated token keeps one key and one
value vector per layer per KV head. This module reads the handful of config fields that fix that
size, under the several spellings model families use, and refuses to guess when a field is missing.
Layers with a sliding window (Mistral, Gemma 2/3's local layers, Qwen2 with
``use_sliding_window``) hold only the last ``window - 1`` tokens in transformers' ``DynamicCache``,
so at N tokens each layer is counted with what it holds: ``min(N, window - 1)`` or N.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_lens.core.errors import LensError
from llm_lens.core.records import head_sharing

DEFAULT_TOKENS = 4096
DEFAULT_DTYPE = "float16"

_DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "fp32": 4,
    "f32": 4,
    "float16": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float8": 1,
    "fp8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
}
_CANONICAL_DTYPE = {
    "fp32": "float32",
    "f32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8": "float8",
}

# Spellings of the same quantity across families, in the order they are tried.
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "n_embed", "d_model")
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")
_FALCON_TYPES = frozenset({"falcon", "RefinedWeb", "RefinedWebModel"})
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


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
        return self._bytes(self.num_kv_heads, dtype_bytes, batch)

    def total_bytes(self, tokens: int, dtype_bytes: int, batch: int = 1) -> int:
        """Bytes the cache holds after `tokens` tokens of each of `batch` sequences."""
        return self._held_bytes(self.num_kv_heads, tokens, dtype_bytes, batch)

    def mha_total_bytes(self, tokens: int, dtype_bytes: int, batch: int = 1) -> int:
        """`total_bytes` if every query head kept its own K/V."""
        return self._held_bytes(self.num_heads, tokens, dtype_bytes, batch)

    def _held_bytes(self, kv_heads: int, tokens: int, dtype_bytes: int, batch: int) -> int:
        _check_positive("tokens", tokens)
        per_layer_token = self._bytes(kv_heads, dtype_bytes, batch) // self.num_layers
        return per_layer_token * sum(self.held_tokens(tokens))

    def mha_bytes_per_token(self, dtype_bytes: int, batch: int = 1) -> int:
        """What a token would cost if every query head kept its own K/V (no GQA/MQA saving)."""
        return self._bytes(self.num_heads, dtype_bytes, batch)

    def _bytes(self, kv_heads: int, dtype_bytes: int, batch: int) -> int:
        _check_positive("dtype_bytes", dtype_bytes)
        _check_positive("batch", batch)
        return 2 * self.num_layers * kv_heads * self.head_dim * dtype_bytes * batch


def _get_int(cfg: Mapping[str, Any], keys: Sequence[str], where: str) -> int | None:
    """The first of `keys` present and not null, checked to be a positive integer."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_COUNT:
            raise ConfigError(
                f"{where} field {key} must be a positive integer up to 2**53, got {_show(value)}"
            )
        return value
    return None


def _require_int(cfg: Mapping[str, Any], keys: Sequence[str], where: str) -> int:
    value = _get_int(cfg, keys, where)
    if value is None:
        raise ConfigError(f"{where} has no {'/'.join(keys)}")
    return value


def _text_section(cfg: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The part of the config describing the language model, and its name for messages."""
    text = cfg.get("text_config")
    if isinstance(text, Mapping):
        return text, "config text_config"
    return cfg, "config"


def _head_dim(cfg: Mapping[str, Any], heads: int, where: str) -> int:
    """Explicit head_dim wins (Gemma: 256 with hidden 3072, 16 heads); else hidden // heads."""
    explicit = _get_int(cfg, ("head_dim",), where)
    if explicit is not None:
        return explicit
    hidden = _get_int(cfg, _HIDDEN_KEYS, where)
    if hidden is None:
        raise ConfigError(f"{where} has no head_dim and no {'/'.join(_HIDDEN_KEYS)}")
    if hidden % heads:
        raise ConfigError(f"{where} hidden size {hidden} is not divisible by {heads} heads")
    return hidden // heads


def _falcon_kv_heads(cfg: Mapping[str, Any], heads: int, where: str) -> int:
    """Falcon's three layouts, with transformers' defaults for fields a config leaves out.

    new_decoder_architecture (Falcon-40B/180B) uses num_kv_heads; otherwise multi_query (default
    true in FalconConfig) means one shared KV head; otherwise every head is cached.
    """
    new_arch = cfg.get("new_decoder_architecture", cfg.get("model_type") == "RefinedWeb")
    if new_arch:
        kv = _get_int(cfg, ("num_kv_heads", "n_head_kv"), where)
        return heads if kv is None else kv
    return 1 if cfg.get("multi_query", True) else heads


def _kv_heads(cfg: Mapping[str, Any], family: str, heads: int, where: str) -> int:
    if family == "falcon":
        return _falcon_kv_heads(cfg, heads, where)
    kv = _get_int(cfg, ("num_key_value_heads",), where)
    if kv is not None:
        return kv
    if cfg.get("multi_query") is True:  # GPT-BigCode / StarCoder spell MQA this way
        return 1
    return heads


def _transformers_config(section: Mapping[str, Any]) -> Any | None:
    """transformers' own config class for this section, which derives the layer types when
    config.json lists none (Gemma 2 alternates, Gemma 3 follows ``sliding_window_pattern``, Qwen2
    reads ``use_sliding_window`` and ``max_window_layers``) and fills its defaults; None when it
    cannot say (an unknown family, or a config its class refuses)."""
    try:
        import logging
        import warnings

        from transformers import CONFIG_MAPPING

        logging.getLogger("transformers").setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return CONFIG_MAPPING[str(section.get("model_type"))](**section)
    except Exception:
        return None


def _window_of(section: Mapping[str, Any], config: Any, key: str, where: str) -> int:
    window = _get_int(section, (key,), where)
    if window is None and isinstance(getattr(config, key, None), int):
        window = int(getattr(config, key))
    if window is None:
        raise ConfigError(f"{where} has layers of sliding type but no {key}")
    return window


def _windows(section: Mapping[str, Any], layers: int, where: str) -> tuple[int, ...]:
    """Per layer, the sliding window its cache keeps (0: full), as transformers builds it."""
    config = None
    types = section.get("layer_types")
    if not isinstance(types, list):
        config = _transformers_config(section)
        types = getattr(config, "layer_types", None)
    if isinstance(types, list):
        out = []
        for t in types:
            if t in ("sliding_attention", "chunked_attention"):
                key = "sliding_window" if t == "sliding_attention" else "attention_chunk_size"
                out.append(_window_of(section, config, key, where))
            else:
                out.append(0)
        return tuple(out)
    window = _get_int(section, ("sliding_window",), where)
    if window is None or section.get("use_sliding_window") is False:
        return (0,) * layers
    return (window,) * layers  # Mistral / Mixtral: every layer windowed


def layout_from_config(cfg: Mapping[str, Any]) -> KVLayout:
    """Read the KV layout from a parsed config.json; raise ConfigError naming any missing field."""
    if cfg.get("is_encoder_decoder") is True:
        raise ConfigError("encoder-decoder configs are not supported (decoder-only models only)")
    section, where = _text_section(cfg)
    model_type = str(section.get("model_type") or cfg.get("model_type") or "unknown")
    family = "falcon" if model_type in _FALCON_TYPES else model_type
    layers = _require_int(section, _LAYER_KEYS, where)
    heads = _require_int(section, _HEAD_KEYS, where)
    return KVLayout(
        family=family,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=_kv_heads(section, family, heads, where),
        head_dim=_head_dim(section, heads, where),
        context_length=_get_int(section, _CONTEXT_KEYS, where),
        windows=_windows(section, layers, where),
    )


def _looks_like_hub_id(spec: str) -> bool:
    return _HUB_ID.fullmatch(spec) is not None and not spec.endswith(".json")


def _local_config_path(spec: str) -> Path | None:
    """The config.json a local spec points at, or None when the spec is a hub id."""
    path = Path(os.path.expanduser(spec))  # an unknown ~user stays as it is: "does not exist"
    try:
        path.stat()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(f"config path {_show(spec)}: {exc.strerror or exc}") from None
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise ConfigError(f"folder {spec} has no config.json")
        return config
    if path.exists():
        return path
    if _looks_like_hub_id(spec):
        return None
    raise ConfigError(f"config path {spec} does not exist")


def _download_config(repo_id: str) -> Path:
    """Fetch config.json from the Hub (or its local cache when offline)."""
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id, "config.json"))
    except Exception as exc:  # hub, network and validation errors all mean "cannot get it"
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ConfigError(
            f"{repo_id} is not a local path and its config.json could not be fetched from the "
            f"Hugging Face Hub (offline and not cached?): {type(exc).__name__}: {first_line}"
        ) from exc


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb", opener=_open_nonblocking) as f:  # a FIFO must not hang the read
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ConfigError(f"{path} is not a regular file")
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path} is larger than a config.json can be (over 64 MiB)")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # also a 5000-digit number, [[[[…]]]] nesting
        raise ConfigError(f"{path} is not valid JSON: {_show(str(exc))}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a JSON {type(data).__name__}, not an object")
    return data


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def load_config(spec: str) -> dict[str, Any]:
    """Parse config.json from a file path, a folder holding one, or a Hugging Face hub id."""
    if not spec.strip():
        raise ConfigError("config spec is empty")
    path = _local_config_path(spec)
    return _read_json(path if path is not None else _download_config(spec))


def _normalise_dtype(name: str) -> str:
    key = name.strip().lower().removeprefix("torch.")
    if key not in _DTYPE_BYTES:
        valid = ", ".join(_DTYPE_BYTES)
        raise ConfigError(f"unknown dtype {name!r}; valid names: {valid}")
    return _CANONICAL_DTYPE.get(key, key)


def dtype_bytes(name: str) -> int:
    """Bytes per element of a dtype named as in configs or on the command line."""
    return _DTYPE_BYTES[_normalise_dtype(name)]


def _config_dtype(cfg: Mapping[str, Any]) -> str:
    """The dtype the checkpoint was saved in; float16 when the config does not say."""
    section, _ = _text_section(cfg)
    for source in (section, cfg):
        for key in ("torch_dtype", "dtype"):
            value = source.get(key)
            if isinstance(value, str):
                return value
    return DEFAULT_DTYPE


def build_report(
    spec: str, cfg: Mapping[str, Any], tokens: int, batch: int, dtype: str | None
) -> dict[str, Any]:
    _check_positive("tokens", tokens)
    _check_positive("batch", batch)
    layout = layout_from_config(cfg)
    name = _normalise_dtype(dtype if dtype is not None else _config_dtype(cfg))
    nbytes = _DTYPE_BYTES[name]
    per_token = layout.bytes_per_token(nbytes, batch)
    mha_per_token = layout.mha_bytes_per_token(nbytes, batch)
    windows = sorted({w for w in layout.windows if w > 0})
    return {
        "model": spec,
        "family": layout.family,
        "num_layers": layout.num_layers,
        "num_heads": layout.num_heads,
        "num_kv_heads": layout.num_kv_heads,
        "head_dim": layout.head_dim,
        "dtype": name,
        "tokens": tokens,
        "batch": batch,
        "bytes_per_token": per_token,
        "total_bytes": layout.total_bytes(tokens, nbytes, batch),
        "mha_bytes_per_token": mha_per_token,
        "mha_total_bytes": layout.mha_total_bytes(tokens, nbytes, batch),
        "gqa_ratio": layout.num_heads // layout.num_kv_heads,
        "layer_windows": list(layout.windows),
        "sliding_layers": layout.sliding_layers,
        "sliding_windows": windows,
        "held_tokens": list(layout.held_tokens(tokens)),
    }


def kv_report(spec: str, tokens: int, batch: int, dtype: str | None) -> dict[str, Any]:
    """KV-cache figures for a model spec; dtype None means the config's own dtype (else float16)."""
    return build_report(spec, load_config(spec), tokens, batch, dtype)


def _human_bytes(n: int) -> str:
    """Binary units (KiB/MiB/GiB/TiB), the way memory is sized."""
    size, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n} B" if unit == "B" else f"{size:.2f} {unit}"


def _formula_lines(r: Mapping[str, Any], nbytes: int) -> list[str]:
    """The formula and its numbers; with sliding windows, per group of layers holding alike."""
    batch_term = " × batch" if r["batch"] != 1 else ""
    batch_num = f" × {r['batch']}" if r["batch"] != 1 else ""
    total = int(r["total_bytes"])
    if not r.get("sliding_layers"):
        numbers = f"2 × {r['num_layers']} × {r['num_kv_heads']} × {r['head_dim']} × {nbytes}"
        return [
            f"formula      2 × layers × kv_heads × head_dim × bytes × tokens{batch_term}",
            f"             {numbers} × {r['tokens']}{batch_num} = {total} bytes",
        ]
    groups: dict[int, int] = {}
    for w in r["layer_windows"]:
        groups[w] = groups.get(w, 0) + 1
    held = dict(zip(r["layer_windows"], r["held_tokens"], strict=True))
    terms = " + ".join(f"{n} × {held[w]}" for w, n in sorted(groups.items()))
    kinds = ", ".join(
        f"{n} full-attention layers hold all {r['tokens']}" if w == 0 else
        f"{n} layers with a {w}-token window hold min(tokens, {w - 1}) = {held[w]}"
        for w, n in sorted(groups.items())
    )  # fmt: skip
    numbers = f"2 × {r['num_kv_heads']} × {r['head_dim']} × {nbytes}"
    return [
        f"formula      Σ layers 2 × kv_heads × head_dim × bytes × tokens held{batch_term}",
        f"windows      {kinds}",
        f"             {numbers} × ({terms}){batch_num} = {total} bytes",
    ]


def format_report(report: Mapping[str, Any]) -> str:
    """A few lines for a person: the layout, the formula with its numbers, and the sizes."""
    r = report
    nbytes = dtype_bytes(str(r["dtype"]))
    total, mha_total = int(r["total_bytes"]), int(r["mha_total_bytes"])
    return "\n".join(
        [
            f"model        {r['model']}  ({r['family']})",
            f"layout       {r['num_layers']} layers, {r['num_heads']} query heads, "
            f"{r['num_kv_heads']} KV heads ({head_sharing(r['num_heads'], r['num_kv_heads'])}), "
            f"head_dim {r['head_dim']}",
            f"dtype        {r['dtype']} ({nbytes} bytes)",
            *_formula_lines(r, nbytes),
            f"per token    {_human_bytes(int(r['bytes_per_token']))} "
            f"({r['bytes_per_token']} bytes)"
            + (" while no window is full yet" if r.get("sliding_layers") else ""),
            f"total        {_human_bytes(total)} ({total} bytes) for {r['tokens']} tokens, "
            f"batch {r['batch']}",
            f"as MHA       {_human_bytes(mha_total)} ({mha_total} bytes) if all "
            f"{r['num_heads']} heads were cached ({r['gqa_ratio']}× the "
            f"{head_sharing(r['num_heads'], r['num_kv_heads']).split()[0]} size)",
        ]
    )
