"""A GGUF file's header and metadata held against the file before it is converted.

transformers builds a model from a GGUF's metadata: a ``block_count`` of a million is a million
layers built before any tensor is read, a ``context_length`` of 0 a model that cannot read one
token, and tensor or key-value counts near 2**64 make a reader loop for ever. The fixed header is
read by hand first (24 bytes), the counts bounded by the file's size; then gguf's reader (a
memory map) gives the metadata and tensor table, which are checked against each other.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

from llm_lens.core.errors import ModelLoadError
from llm_lens.core.guards.files import check_regular

MIN_TENSOR_INFO = 8 + 4 + 8 + 4 + 8  # name length, dims, one dim, type, offset
MIN_KV = 8 + 4  # key length, value type
BLOCK = re.compile(r"^blk\.(\d+)\.")


def check_gguf(path: Path, spec: str) -> None:
    """Refuse a GGUF whose header or metadata lies, in one line naming what."""
    check_regular(path, spec, None, missing_ok=False)
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:4] != b"GGUF":
        raise ModelLoadError(f"{spec}: not a readable GGUF model (no GGUF header)")
    version, tensors, kvs = struct.unpack("<IQQ", head[4:24])
    if version not in (2, 3):
        raise ModelLoadError(f"{spec}: GGUF version {version} is not one LLM Lens reads (2, 3)")
    if tensors > size // MIN_TENSOR_INFO or kvs > size // MIN_KV:
        raise ModelLoadError(
            f"{spec}: the GGUF header claims {tensors} tensors and {kvs} metadata entries; "
            f"a file of {size} bytes cannot hold them"
        )
    reader = _reader(path, spec)
    _check_metadata(reader, spec, size)


def _reader(path: Path, spec: str) -> Any:
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except (ValueError, IndexError, KeyError, OSError, struct.error, OverflowError) as exc:
        text = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise ModelLoadError(f"{spec}: not a readable GGUF model ({text})") from None


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        return field.contents()
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def _check_metadata(reader: Any, spec: str, size: int) -> None:
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise ModelLoadError(f"{spec}: the GGUF names no general.architecture")
    blocks = {int(m.group(1)) for t in reader.tensors if (m := BLOCK.match(t.name))}
    claimed = _field(reader, f"{arch}.block_count")
    if isinstance(claimed, int) and blocks and claimed > len(blocks):
        raise ModelLoadError(
            f"{spec}: the GGUF claims {claimed} layers ({arch}.block_count); its tensors hold "
            f"{len(blocks)}"
        )
    if claimed == 0:
        raise ModelLoadError(f"{spec}: the GGUF claims 0 layers ({arch}.block_count)")
    context = _field(reader, f"{arch}.context_length")
    if context is not None and (not isinstance(context, int) or context < 1):
        raise ModelLoadError(
            f"{spec}: the GGUF's context length ({arch}.context_length) is {context}; "
            "a model needs at least 1 position"
        )
    for tensor in reader.tensors:
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        if end > size:
            raise ModelLoadError(
                f"{spec}: GGUF tensor {tensor.name} lies at bytes {tensor.data_offset}-{end}; "
                f"the file has {size}"
            )
    _check_vocab(reader, spec)


def _check_vocab(reader: Any, spec: str) -> None:
    """The tokenizer's vocabulary and the embedding table agree (GGUF stores [hidden, vocab])."""
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    embd = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if tokens is None or embd is None or len(embd.shape) != 2:
        return
    vocab, rows = len(tokens.data), int(embd.shape[1])
    if vocab > rows:
        raise ModelLoadError(
            f"{spec}: weight token_embd.weight is [{rows}, {int(embd.shape[0])}] in the file; "
            f"the GGUF's vocabulary implies [{vocab}, {int(embd.shape[0])}]"
        )
