"""A model's KV layout from its parsed config.json, without loading any weights.

This reads the handful of config fields that fix the cache's size, under the several spellings
model families use, and refuses to guess when a field is missing. Which layers keep a sliding
window comes from the config's ``layer_types``, or from transformers' own config class where the
file lists none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llm_lens.core.kvcache.formula import MAX_COUNT, ConfigError, KVLayout, _show
from llm_lens.core.kvcache.modules import BuiltLayers

# Spellings of the same quantity across families, in the order they are tried.
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "attention_heads",
              "decoder_attention_heads")  # fmt: skip
_HIDDEN_KEYS = ("hidden_size", "n_embd", "n_embed", "d_model")
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")
_FALCON_TYPES = frozenset({"falcon", "RefinedWeb", "RefinedWebModel"})


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
    explicit = _get_int(cfg, ("head_dim", "dim_head"), where)  # CPM-Ant: dim_head
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
    attn = cfg.get("attn_config")  # DBRX keeps its KV heads in a section of its own
    if isinstance(attn, Mapping) and _get_int(attn, ("kv_n_heads",), where) is not None:
        return min(heads, int(attn["kv_n_heads"]))
    if cfg.get("multi_query") is True:  # GPT-BigCode / StarCoder spell MQA this way
        return 1
    return heads


def _transformers_config(section: Mapping[str, Any]) -> Any | None:
    """transformers' own config class for this section, which derives the layer types when
    config.json lists none (Gemma 2 alternates, Gemma 3 follows ``sliding_window_pattern``, Qwen2
    reads ``use_sliding_window`` and ``max_window_layers``, Mamba's layers are all
    ``linear_attention``) and fills its defaults; None when it cannot say (an unknown family, or a
    config its class refuses even with only its plain fields)."""
    import logging
    import warnings

    from transformers import CONFIG_MAPPING

    logging.getLogger("transformers").setLevel(logging.ERROR)
    plain = {k: v for k, v in section.items() if _plain(v)}  # e.g. not Mamba2's encoded ∞
    for fields in (section, plain):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return CONFIG_MAPPING[str(section.get("model_type"))](**fields)
        except Exception:
            continue
    return None


transformers_config = _transformers_config  # the same, for the report's module-built state


def _plain(value: Any) -> bool:
    """A number, string, bool or null, or a list of them."""
    if isinstance(value, list):
        return all(_plain(v) and not isinstance(v, list) for v in value)
    return value is None or isinstance(value, int | float | str | bool)


def _window_of(section: Mapping[str, Any], config: Any, key: str, where: str) -> int:
    window = _get_int(section, (key, key + "_size"), where)  # Inkling: sliding_window_size
    if window is None and isinstance(getattr(config, key, None), int):
        window = int(getattr(config, key))
    if window is None:
        raise ConfigError(f"{where} has layers of sliding type but no {key}")
    return window


def _layer_types(section: Mapping[str, Any]) -> tuple[list[Any] | None, Any]:
    """The config's per-layer types (transformers' own class derives them when config.json
    lists none, or lists them as ``layers_block_type``), and that class's config, if made."""
    config = None
    types = section.get("layer_types")
    if not isinstance(types, list):
        config = _transformers_config(section)
        types = getattr(config, "layer_types", None)
    return (types if isinstance(types, list) else None), config


def _kv_free(section: Mapping[str, Any], layers: int) -> tuple[bool, ...]:
    """Per layer, True where it keeps no K/V: a type that is not softmax attention (transformers'
    ``linear_attention``, Mamba, convolution, an MLP-only layer); Zamba2's "hybrid" has one."""
    types, _config = _layer_types(section)
    shared = section.get("num_kv_shared_layers") or 0  # Gemma 3n's last layers read earlier K/V
    shared = shared if isinstance(shared, int) and 0 < shared <= layers else 0
    last = [i >= layers - shared for i in range(layers)]
    if types is None or len(types) != layers:
        return tuple(last)
    return tuple(
        s or not (t == "hybrid" or ("attention" in str(t) and "linear" not in str(t)))
        for t, s in zip(types, last, strict=True)
    )


def _latent(section: Mapping[str, Any], heads: int, where: str) -> tuple[int, int]:
    """Latent attention (DeepSeek's MLA): (latent + rotary key, per-head K/V of every head)
    elements a token, or (0, 0) for a config without ``kv_lora_rank``."""
    rank = _get_int(section, ("kv_lora_rank",), where)
    if rank is None:
        return 0, 0
    rope = _get_int(section, ("qk_rope_head_dim",), where) or 0
    nope = _get_int(section, ("qk_nope_head_dim",), where) or 0
    value = _get_int(section, ("v_head_dim",), where) or 0
    return rank + rope, heads * (nope + rope + value)


def _windows(section: Mapping[str, Any], layers: int, where: str) -> tuple[int, ...]:
    """Per layer, the sliding window its cache keeps (0: full), as transformers builds it."""
    types, config = _layer_types(section)
    if isinstance(types, list):
        out = []
        for t in types:
            if "sliding" in str(t) or t == "chunked_attention":  # Inkling's "hybrid_sliding"
                key = "sliding_window" if "sliding" in str(t) else "attention_chunk_size"
                out.append(_window_of(section, config, key, where))
            else:
                out.append(0)
        return tuple(out)
    window = _get_int(section, ("sliding_window",), where)
    if window is None or section.get("use_sliding_window") is False:
        return (0,) * layers
    return (window,) * layers  # Mistral / Mixtral: every layer windowed


def _layer_head_dims(section: Mapping[str, Any], layers: int, head_dim: int) -> tuple[int, ...]:
    """Per layer, its head size where ``per_layer_config`` (keys: layer indices) gives some
    layers their own (Gemma 4's full-attention layers); empty where every layer has one size."""
    own = section.get("per_layer_config")
    if not isinstance(own, Mapping):
        return ()
    dims = [head_dim] * layers
    for key, fields in own.items():
        if str(key).isdigit() and int(key) < layers and isinstance(fields, Mapping):
            value = fields.get("head_dim")
            dims[int(key)] = value if isinstance(value, int) and value > 0 else head_dim
    return tuple(dims) if len(set(dims)) > 1 else ()


def _built(section: Mapping[str, Any], layers: int) -> BuiltLayers | None:
    """The layers as transformers' own code builds them from this config (on the meta device:
    :mod:`.modules`); None where the model cannot be built or its layers are not ``layers``."""
    from llm_lens.core.kvcache.modules import layers_from_config

    config = _transformers_config(section)
    built = None if config is None else layers_from_config(config)
    return built if built is not None and len(built.kv_heads) == layers else None


def _layer_kv_heads(built: BuiltLayers | None, kv: int) -> tuple[int, ...]:
    """Per layer, the K/V heads its attention module keeps as built, where layers differ from
    ``kv`` (MiMo-V2-Flash doubles its sliding layers' heads in code, not in its config;
    Inkling's have a count of their own); empty where every attention layer keeps ``kv``."""
    if built is None:
        return ()
    return built.kv_heads if any(h not in (0, kv) for h in built.kv_heads) else ()


def _built_head_dims(built: BuiltLayers | None, head_dim: int) -> tuple[int, ...]:
    """Per layer, its attention module's head size as built, where some differ from
    ``head_dim`` (Inkling's sliding layers: ``swa_head_dim``); empty where none does."""
    if built is None or len(built.head_dims) != len(built.kv_heads):
        return ()
    dims = tuple(d or head_dim for d in built.head_dims)
    return dims if any(d != head_dim for d in dims) else ()


def _sublayers(section: Mapping[str, Any]) -> int:
    """Attention sublayers per block where config.json counts blocks and transformers' config
    class derives the cache's layers from them (LongCat-Flash: ``num_layers`` blocks, its
    ``num_hidden_layers`` property twice that, one cache layer a sublayer); else 1."""
    if "num_hidden_layers" in section or not isinstance(section.get("num_layers"), int):
        return 1
    config = _transformers_config(section)
    derived = isinstance(getattr(type(config), "num_hidden_layers", None), property)
    count = getattr(config, "num_hidden_layers", None) if derived else None
    blocks = int(section["num_layers"])
    if isinstance(count, int) and blocks > 0 and count > blocks and not count % blocks:
        return count // blocks
    return 1


def layout_from_config(cfg: Mapping[str, Any]) -> KVLayout:
    """Read the KV layout from a parsed config.json; raise ConfigError naming any missing field."""
    if cfg.get("is_encoder_decoder") is True:
        raise ConfigError("encoder-decoder configs are not supported (decoder-only models only)")
    section, where = _text_section(cfg)
    model_type = str(section.get("model_type") or cfg.get("model_type") or "unknown")
    family = "falcon" if model_type in _FALCON_TYPES else model_type
    listed = section.get("layers_block_type") or section.get("layer_types")
    if _get_int(section, _LAYER_KEYS, where) is None and isinstance(listed, list) and listed:
        layers = len(listed)  # Nemotron-H: one entry a layer, no separate count
    else:
        layers = _require_int(section, _LAYER_KEYS, where) * _sublayers(section)
    kv_free = _kv_free(section, layers)
    built = _built(section, layers) if _get_int(section, _HEAD_KEYS, where) else None
    if built is not None:  # the modules say which layers attend (Inkling's "hybrid_sliding")
        kv_free = tuple(h == 0 for h in built.kv_heads)
    if _get_int(section, _HEAD_KEYS, where) is None and all(kv_free):
        # a pure state-space model (Mamba): no layer keeps K/V, its state is constant
        return KVLayout(family, layers, 1, 1, 1, _get_int(section, _CONTEXT_KEYS, where),
                        kv_free=kv_free)  # fmt: skip
    heads = _require_int(section, _HEAD_KEYS, where)
    latent, latent_mha = _latent(section, heads, where)
    head_dim = _head_dim(section, heads, where)
    kv = _kv_heads(section, family, heads, where)
    return KVLayout(
        family=family,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        context_length=_get_int(section, _CONTEXT_KEYS, where),
        windows=_cache_windows(_windows(section, layers, where), built),
        kv_free=kv_free,
        latent_dim=latent,
        latent_mha_dim=latent_mha,
        layer_head_dims=_layer_head_dims(section, layers, head_dim)
        or (() if latent else _built_head_dims(built, head_dim)),
        layer_kv_heads=() if latent else _layer_kv_heads(built, kv),
        **_compressing(built),
    )


def _cache_windows(windows: tuple[int, ...], built: BuiltLayers | None) -> tuple[int, ...]:
    """``windows`` with the window of the cache transformers builds from the config where the
    config's layer types name none (DeepSeek-V4's compressing layers keep a sliding window)."""
    if built is None or len(built.windows) != len(windows):
        return windows
    return tuple(w or b for w, b in zip(windows, built.windows, strict=True))


def _compressing(built: BuiltLayers | None) -> dict[str, Any]:
    """The layout's ``layer_kv_copies`` and ``compressors`` as the modules built them, where
    some layer keeps one vector as key and value or has a compressor (DeepSeek-V4)."""
    if built is None:
        return {}
    out: dict[str, Any] = {}
    if any(c != 2 for c in built.kv_copies):
        out["layer_kv_copies"] = built.kv_copies
    if any(built.compressors):
        out["compressors"] = built.compressors
    return out
