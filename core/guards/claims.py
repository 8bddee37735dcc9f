"""A model folder's size claims held against its files before anything is allocated.

A ``config.json`` claiming a million layers makes transformers build a million layers before it
finds no weights for them (minutes, then gigabytes); a ``.safetensors`` header can claim tensors
past the end of the file or a header of terabytes. The headers are read here (a few bytes each,
never the tensors), every tensor's extent is checked against the file, and the config's counts
against what the weights hold.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_lens.core.errors import ModelLoadError

MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own limit on a header
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
    "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
    "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}  # fmt: skip
COUNT_LIMITS = {  # a config field's largest sane value (the largest real models: 10x below)
    "num_hidden_layers": 4096, "n_layer": 4096, "num_layers": 4096,
    "hidden_size": 2**18, "n_embd": 2**18, "d_model": 2**18,
    "intermediate_size": 2**20, "vocab_size": 2**24, "num_attention_heads": 2**14,
    "num_key_value_heads": 2**14, "head_dim": 2**16,
    "max_position_embeddings": 2**31, "n_positions": 2**31,
}  # fmt: skip
POSITIVE = ("num_hidden_layers", "hidden_size", "vocab_size", "max_position_embeddings")
LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer|block)\.(\d+)\.")
SLACK_ELEMENTS = 2**20


@dataclass(frozen=True)
class HeldWeights:
    """What the weight files hold, from their headers: element count and layer indices."""

    elements: int
    layers: frozenset[int]
    shapes: dict[str, tuple[int, ...]]


def check_folder_claims(folder: Path, spec: str) -> None:
    """Refuse the folder when a safetensors header lies about its file or the config claims
    numbers its weights cannot back (one line naming the file, field or tensor)."""
    held = held_weights(folder, spec)
    config = _read_config(folder / "config.json", spec)
    if config is None:
        return
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    counts = {k: _count(text, k, spec) for k in COUNT_LIMITS if k in text}
    for key in POSITIVE:
        if counts.get(key) == 0:
            raise ModelLoadError(f"{spec}: config.json's {key} is 0; a model needs at least 1")
    if held is not None:
        _check_against(held, counts, spec)


def held_weights(folder: Path, spec: str) -> HeldWeights | None:
    """The safetensors files' headers read and checked; None when the weights are not all
    safetensors (a ``.bin`` is unpickled with ``weights_only``; its size stands for it)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files or any(folder.glob("*.bin")):
        return None
    elements, layers, shapes = 0, set(), {}
    for path in files:
        for name, shape in safetensors_header(path, spec).items():
            elements += math.prod(shape)
            shapes[name] = shape
            found = LAYER_INDEX.search(name)
            if found:
                layers.add(int(found.group(1)))
    return HeldWeights(elements, frozenset(layers), shapes)


def safetensors_header(path: Path, spec: str) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from a ``.safetensors`` header, every entry checked against the file
    (dtype known, the extent inside the data, as many bytes as the shape needs)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _bad(spec, path, f"{size} bytes, shorter than a header")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise _bad(spec, path, f"header claims {length} bytes; the file has {size - 8}")
        try:
            header = json.loads(f.read(length))
        except (ValueError, UnicodeDecodeError) as exc:
            raise _bad(spec, path, f"header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _bad(spec, path, "header is not a JSON object")
    data = size - 8 - length
    return {
        name: _entry(spec, path, name, entry, data)
        for name, entry in header.items()
        if name != "__metadata__"
    }


def _entry(spec: str, path: Path, name: str, entry: Any, data: int) -> tuple[int, ...]:
    fields = entry if isinstance(entry, dict) else {}
    dtype, shape, offsets = (fields.get(k) for k in ("dtype", "shape", "data_offsets"))
    if dtype not in DTYPE_BYTES or not _ints(shape) or not _ints(offsets, 2):
        raise _bad(spec, path, f"tensor {name!r} has a malformed entry")
    assert isinstance(shape, list) and isinstance(offsets, list)
    begin, end = offsets
    need = math.ceil(math.prod(shape) * DTYPE_BYTES[dtype])
    if not begin <= end <= data:
        raise _bad(spec, path, f"tensor {name} lies at bytes {begin}-{end}; the data has {data}")
    if end - begin != need:
        raise _bad(
            spec, path, f"tensor {name} is {shape} {dtype} ({need} bytes) in {end - begin} bytes"
        )
    return tuple(shape)


def _ints(value: Any, count: int | None = None) -> bool:
    """A list of whole numbers from 0 to 2**53 (of ``count`` items when given)."""
    return (
        isinstance(value, list)
        and all(type(x) is int and 0 <= x < 2**53 for x in value)
        and (count is None or len(value) == count)
    )


def _check_against(held: HeldWeights, counts: dict[str, int], spec: str) -> None:
    layers = counts.get("num_hidden_layers") or counts.get("n_layer") or counts.get("num_layers")
    hidden = counts.get("hidden_size") or counts.get("n_embd") or counts.get("d_model") or 0
    vocab = counts.get("vocab_size", 0)
    if layers and held.layers and layers > len(held.layers):
        raise ModelLoadError(
            f"{spec}: config.json claims {layers} layers; the weights hold {len(held.layers)} "
            f"(layers {min(held.layers)}-{max(held.layers)})"
        )
    least = (layers or 0) * hidden * hidden + vocab * hidden  # a lower bound of any family's size
    if least > 2 * held.elements + SLACK_ELEMENTS:
        raise ModelLoadError(
            f"{spec}: config.json claims a model of at least {least:,} parameters "
            f"({layers} layers of {hidden}, a vocabulary of {vocab}); the weights hold "
            f"{held.elements:,}"
        )


def _count(config: dict[str, Any], key: str, spec: str) -> int:
    value = config[key]
    if value is None:
        return 0 if key not in POSITIVE else _refuse_count(spec, key, value)
    if isinstance(value, list) and value and all(type(v) is int for v in value):
        value = max(value)  # one per layer (Gemma 3n's intermediate_size): its largest
    if type(value) is not int or not 0 <= value <= COUNT_LIMITS[key]:
        _refuse_count(spec, key, value)
    return int(value)


def _refuse_count(spec: str, key: str, value: Any) -> int:
    shown = repr(value)[:40]
    raise ModelLoadError(
        f"{spec}: config.json's {key} is {shown}; expected a whole number from 0 to "
        f"{COUNT_LIMITS[key]}"
    )


def _read_config(path: Path, spec: str) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise ModelLoadError(f"{spec}: config.json is not readable JSON ({_first(exc)})") from None
    return data if isinstance(data, dict) else None


def _bad(spec: str, path: Path, why: str) -> ModelLoadError:
    return ModelLoadError(f"{spec}: {path.name} is not a valid safetensors file: {why}")


def _first(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:160]
