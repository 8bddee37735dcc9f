"""The KV-cache report of ``llm-lens kv``: a model spec's figures, and the lines a person reads.

:func:`build_report` puts the formula's numbers for one layout, dtype, context and batch into a
plain dict (the JSON output); :func:`format_report` writes it out with the formula and its numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_lens.core.kvcache.config import _text_section, layout_from_config, transformers_config
from llm_lens.core.kvcache.config_file import load_config
from llm_lens.core.kvcache.formula import ConfigError, KVLayout, _check_positive
from llm_lens.core.kvcache.measure import config_keeps_no_cache, no_cache_line
from llm_lens.core.kvcache.modules import may_hold_state, state_elements_from_config
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
    state = config_state_bytes(cfg, nbytes, batch)
    if config_keeps_no_cache(cfg):  # GPT-1: nothing held; the formula would be made up
        per_token = mha_per_token = 0
    return {
        "model": spec,
        "family": layout.family,
        "num_layers": layout.num_layers,
        "num_heads": layout.num_heads,
        "num_kv_heads": _kv_heads_held(layout),
        "head_dim": layout.head_dim,
        "dtype": name,
        "tokens": tokens,
        "batch": batch,
        "bytes_per_token": per_token,
        "total_bytes": layout.total_bytes(tokens, nbytes, batch) if per_token else 0,
        "mha_bytes_per_token": mha_per_token,
        "mha_total_bytes": layout.mha_total_bytes(tokens, nbytes, batch) if per_token else 0,
        "gqa_ratio": layout.num_heads // _kv_heads_held(layout),
        "layer_windows": list(layout.windows),
        "sliding_layers": layout.sliding_layers,
        "sliding_windows": windows,
        "held_tokens": list(layout.held_tokens(tokens)),
        # only where they differ from a plain layout: layers keeping K/V, a latent's width
        **({"kv_layers": layout.kv_layers} if layout.kv_layers < layout.num_layers else {}),
        **({"latent_dim": layout.latent_dim} if layout.latent_dim else {}),
        **({"layer_head_dims": list(layout.layer_head_dims)} if layout.layer_head_dims else {}),
        **({"layer_kv_heads": list(layout.layer_kv_heads)} if layout.layer_kv_heads else {}),
        **({"layer_kv_copies": list(layout.layer_kv_copies)} if layout.layer_kv_copies else {}),
        **(
            {"compressed_bytes": layout.compressed_bytes(tokens, nbytes, batch)}
            if layout.compressors and per_token
            else {}
        ),
        **({"kv_free": list(layout.kv_free)} if any(layout.kv_free) else {}),
        # a hybrid's conv/recurrent state: constant, apart from the K/V that grow
        **({"state_bytes": state} if state else {}),
        **({"no_cache": True} if config_keeps_no_cache(cfg) else {}),
    }


def _kv_heads_held(layout: KVLayout) -> int:
    """The K/V heads every attending layer's module keeps where they agree and differ from
    the config's ``num_key_value_heads`` (DeepSeek-V4's config says 4; each layer keeps one),
    else the config's."""
    own = {h for h, f in zip(layout.layer_kv_heads, layout.kv_free, strict=False) if h and not f}
    heads = next(iter(own), 0) if len(own) == 1 else 0
    return heads if heads and layout.num_heads % heads == 0 else layout.num_kv_heads


def config_state_bytes(cfg: Mapping[str, Any], nbytes: int, batch: int) -> int:
    """Bytes of constant conv/recurrent state the cache keeps, from the config's own modules
    (:mod:`.modules`); 0 for a config that names nothing stateful."""
    section, _where = _text_section(cfg)
    if not may_hold_state(section):
        return 0
    config = transformers_config(section)
    elements = None if config is None else state_elements_from_config(config)
    return sum(elements or ()) * nbytes * batch


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


def _kept_lines(r: Mapping[str, Any]) -> tuple[int, list[str]]:
    """The layers that keep K/V, and a line saying so where some keep none (hybrids)."""
    layers, kv_layers = int(r["num_layers"]), int(r.get("kv_layers", r["num_layers"]))
    if kv_layers == layers:
        return kv_layers, []
    return kv_layers, [
        f"K/V layers   {kv_layers} of {layers} keep K/V; the others keep none that grows (a "
        "state-space, linear-attention or convolution layer's state is constant; a shared-K/V "
        "layer reads another layer's)"
    ]


def _formula_lines(r: Mapping[str, Any], nbytes: int) -> list[str]:
    """The formula and its numbers; with sliding windows, per group of layers holding alike."""
    batch_term = " × batch" if r["batch"] != 1 else ""
    batch_num = f" × {r['batch']}" if r["batch"] != 1 else ""
    total = int(r["total_bytes"])
    kv_layers, kept = _kept_lines(r)
    if r.get("latent_dim"):
        return [
            *kept,
            f"formula      layers × latent × bytes × tokens{batch_term} (latent attention: one "
            "compressed latent and rotary key a token, shared by every head)",
            f"             {kv_layers} × {r['latent_dim']} × {nbytes} × {r['tokens']}{batch_num}"
            f" = {total} bytes",
        ]
    if r.get("layer_head_dims") or r.get("layer_kv_heads"):
        return [*kept, *_per_layer_lines(r, nbytes, batch_term, batch_num)]
    if not r.get("sliding_layers"):
        numbers = f"2 × {kv_layers} × {r['num_kv_heads']} × {r['head_dim']} × {nbytes}"
        return [
            *kept,
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
        *kept,
        f"formula      Σ layers 2 × kv_heads × head_dim × bytes × tokens held{batch_term}",
        f"windows      {kinds}",
        f"             {numbers} × ({terms}){batch_num} = {total} bytes",
    ]


def _per_layer_lines(
    r: Mapping[str, Any], nbytes: int, batch_term: str, batch_num: str
) -> list[str]:
    """The formula where layers differ in K/V heads (MiMo, Inkling) or head size (Gemma 4):
    one term per group of layers alike in heads, head size and tokens held."""
    n = int(r["num_layers"])
    dims = r.get("layer_head_dims") or [r["head_dim"]] * n
    heads = r.get("layer_kv_heads") or [r["num_kv_heads"]] * n
    free = r.get("kv_free") or [False] * n
    copies = r.get("layer_kv_copies") or [2] * n
    groups: dict[tuple[int, int, int, int], int] = {}
    for k, d, held, f, t in zip(heads, dims, r["held_tokens"], free, copies, strict=True):
        if not f and k:
            groups[(t, k, d, held)] = groups.get((t, k, d, held), 0) + 1
    terms = " + ".join(
        f"{c} × {t} × {k} × {d} × {nbytes} × {held}" for (t, k, d, held), c in groups.items()
    )
    kv_total = int(r["total_bytes"]) - int(r.get("compressed_bytes", 0))
    tensors = "tensors(layer)" if r.get("layer_kv_copies") else "2"
    return [
        f"formula      Σ layers {tensors} × kv_heads(layer) × head_dim(layer) × bytes × "
        "tokens held" + batch_term,
        *(
            ["             (tensors: 2, a key and a value; 1 where the key is the value)"]
            if r.get("layer_kv_copies")
            else []
        ),
        f"             ({terms}){batch_num} = {kv_total} bytes",
        *_compressed_lines(r, kv_total),
    ]


def _compressed_lines(r: Mapping[str, Any], kv_total: int) -> list[str]:
    """What compressing attention layers (DeepSeek-V4) hold beside their K/V."""
    extra = int(r.get("compressed_bytes", 0))
    if not extra:
        return []
    return [
        f"compressors  + {extra} bytes: tokens waiting for a full window, one compressed entry "
        "a window, the overlap series",
        f"             {kv_total} + {extra} = {int(r['total_bytes'])} bytes",
    ]


def format_report(report: Mapping[str, Any]) -> str:
    """A few lines for a person: the layout, the formula with its numbers, and the sizes."""
    r = report
    nbytes = dtype_bytes(str(r["dtype"]))
    total, mha_total = int(r["total_bytes"]), int(r["mha_total_bytes"])
    if r.get("no_cache"):
        return f"model        {r['model']}  ({r['family']})\n{no_cache_line(int(r['tokens']))}"
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
            *_state_lines(r),
        ]
    )


def _state_lines(r: Mapping[str, Any]) -> list[str]:
    """A hybrid's constant part, beside the K/V that grow."""
    state = int(r.get("state_bytes", 0))
    if not state:
        return []
    held = int(r["total_bytes"]) + state
    return [
        f"state        {_human_bytes(state)} ({state} bytes) of conv/recurrent state, constant "
        "at any number of tokens",
        f"held         {_human_bytes(held)} ({held} bytes): the K/V above plus that state",
    ]
