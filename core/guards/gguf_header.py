"""A lean, bounded reader of a GGUF's metadata and tensor table (no tensor data is read).

gguf's own reader parses every token of the vocabulary into numpy objects (six seconds for
SmolLM2's 49,152 tokens and 48,900 merges); this one walks the same bytes through a memory
map, checks every length against what is left of the file before using it, and keeps only the
numbers LLM Lens checks: scalars and strings by key, arrays by their length.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}  # fmt: skip
STRING, ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32


class HeaderError(ValueError):
    """The bytes do not hold what the header says they hold."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # GGUF's order: the fastest-varying dimension first
    kind: int  # ggml type
    offset: int  # from the start of the data section


@dataclass(frozen=True)
class Header:
    fields: dict[str, Any]  # scalars and strings; an array as ("array", its length)
    tensors: tuple[TensorInfo, ...]
    data_start: int


class _Cursor:
    def __init__(self, buf: Any) -> None:
        self.buf, self.at = buf, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.buf):
            raise HeaderError(f"needs {n} bytes at byte {self.at}; the file has {len(self.buf)}")
        out = bytes(self.buf[self.at : self.at + n])
        self.at += n
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", "replace")

    def skip_string(self) -> None:
        self._skip(self.unpack("<Q"))

    def _skip(self, n: int) -> None:
        if self.at + n > len(self.buf):
            raise HeaderError(f"a string of {n} bytes at byte {self.at} runs past the file")
        self.at += n


def read_header(path: Path) -> Header:
    """The metadata and tensor table of the GGUF at ``path``, or :class:`HeaderError`."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf)
        cur.take(8)  # magic and version, checked by the caller
        tensors, kvs = cur.unpack("<Q"), cur.unpack("<Q")
        fields = {}
        for _ in range(kvs):
            key = cur.string()
            fields[key] = _value(cur, cur.unpack("<I"))
        infos = tuple(_tensor(cur) for _ in range(tensors))
        align = fields.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align < 1:
            raise HeaderError(f"general.alignment is {align!r}")
        start = -(-cur.at // align) * align
    return Header(fields, infos, start)


def _value(cur: _Cursor, kind: int) -> Any:
    if kind in SCALARS:
        return cur.unpack(SCALARS[kind])
    if kind == STRING:
        return cur.string()
    if kind != ARRAY:
        raise HeaderError(f"unknown value type {kind} at byte {cur.at}")
    item, count = cur.unpack("<I"), cur.unpack("<Q")
    if item in SCALARS:
        cur.take(count * struct.calcsize(SCALARS[item]))  # bounded by the file: checked first
    elif item == STRING:
        if count * 8 > len(cur.buf) - cur.at:
            raise HeaderError(f"an array of {count} strings cannot fit in the file")
        for _ in range(count):
            cur.skip_string()
    else:
        raise HeaderError(f"an array of type {item} is not one LLM Lens reads")
    return ("array", count)


def _tensor(cur: _Cursor) -> TensorInfo:
    name = cur.string()
    dims = cur.unpack("<I")
    if dims > 8:
        raise HeaderError(f"tensor {name} claims {dims} dimensions")
    shape = tuple(cur.unpack("<Q") for _ in range(dims))
    return TensorInfo(name, shape, cur.unpack("<I"), cur.unpack("<Q"))


def tensor_bytes(info: TensorInfo) -> int:
    """Bytes the tensor's data takes (ggml's block size and bytes per block for its type)."""
    import math

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(info.kind)]
    except (ValueError, KeyError):
        raise HeaderError(f"tensor {info.name} has unknown type {info.kind}") from None
    return math.prod(info.shape) // block * size
