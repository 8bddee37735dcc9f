"""A GGUF file's header and metadata held against the file before it is converted.

transformers builds a model from a GGUF's metadata: a ``block_count`` of a million is a million
layers built before any tensor is read, a ``context_length`` of 0 a model that cannot read one
token, and tensor or key-value counts near 2**64 make a reader loop for ever. The fixed header is
read by hand first (24 bytes), the counts bounded by the file's size; then a
lean reader of our own (:mod:`~llm_lens.core.guards.gguf_header`, every length bounded by the
file) gives the metadata and tensor table, which are checked against each other.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from llm_lens.core.errors import ModelLoadError
from llm_lens.core.guards.files import check_regular
from llm_lens.core.guards.gguf_header import Header, HeaderError, read_header, tensor_bytes

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
    try:
        header = read_header(path)
    except HeaderError as exc:
        raise ModelLoadError(f"{spec}: not a readable GGUF model ({exc})") from None
    _check_metadata(header, spec, size)


def _check_metadata(header: Header, spec: str, size: int) -> None:
    fields = header.fields
    arch = fields.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelLoadError(f"{spec}: the GGUF names no general.architecture")
    blocks = {int(m.group(1)) for t in header.tensors if (m := BLOCK.match(t.name))}
    claimed = fields.get(f"{arch}.block_count")
    if isinstance(claimed, int) and blocks and claimed > len(blocks):
        raise ModelLoadError(
            f"{spec}: the GGUF claims {claimed} layers ({arch}.block_count); its tensors hold "
            f"{len(blocks)}"
        )
    if claimed == 0:
        raise ModelLoadError(f"{spec}: the GGUF claims 0 layers ({arch}.block_count)")
    context = fields.get(f"{arch}.context_length")
    if context is not None and (not isinstance(context, int) or context < 1):
        raise ModelLoadError(
            f"{spec}: the GGUF's context length ({arch}.context_length) is {context}; "
            "a model needs at least 1 position"
        )
    for tensor in header.tensors:
        try:
            end = header.data_start + tensor.offset + tensor_bytes(tensor)
        except HeaderError as exc:
            raise ModelLoadError(f"{spec}: not a readable GGUF model ({exc})") from None
        if end > size:
            raise ModelLoadError(
                f"{spec}: GGUF tensor {tensor.name} lies at bytes "
                f"{header.data_start + tensor.offset}-{end}; the file has {size}"
            )
    _check_vocab(header, spec)


def _check_vocab(header: Header, spec: str) -> None:
    """The tokenizer's vocabulary and the embedding table agree (GGUF stores [hidden, vocab])."""
    tokens = header.fields.get("tokenizer.ggml.tokens")
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    if not isinstance(tokens, tuple) or embd is None or len(embd.shape) != 2:
        return
    vocab, rows, hidden = int(tokens[1]), int(embd.shape[1]), int(embd.shape[0])
    if vocab > rows:
        raise ModelLoadError(
            f"{spec}: weight token_embd.weight is [{rows}, {hidden}] in the file; "
            f"the GGUF's vocabulary implies [{vocab}, {hidden}]"
        )
