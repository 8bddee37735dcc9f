"""Files for the hostile-input catalogue: a tiny model folder and its hostile variants (links to
devices, FIFOs, lying configs and headers, pathological templates and regexes), tiny GGUFs with
lying headers. Nothing here loads a model."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np

HIDDEN = 16


def tiny_folder(out: Path, tokenizer) -> Path:
    """A 2-layer random Llama (hidden 16) with the bundled tokenizer, saved as a model folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
        eos_token_id=2, bos_token_id=1, tie_word_embeddings=True,
        architectures=["LlamaForCausalLM"],
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def variant(base: Path, dest: Path, config: dict | None = None, drop: tuple[str, ...] = ()) -> Path:
    """A copy of ``base`` (the weights linked, not copied) with ``config`` merged into its
    config.json (a key set to None is removed)."""
    dest.mkdir(parents=True)
    for item in base.iterdir():
        if item.name in drop:
            continue
        if item.suffix == ".safetensors":
            os.symlink(item, dest / item.name)
        else:
            shutil.copy(item, dest / item.name)
    if config:
        data = json.loads((base / "config.json").read_text())
        for key, value in config.items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        (dest / "config.json").write_text(json.dumps(data))
    return dest


def replace_file(folder: Path, name: str, how: str, payload: object = None) -> Path:
    """``folder/name`` turned into a FIFO, a link (to ``payload``), a folder, a sparse file of
    ``payload`` bytes, or ``payload`` bytes/text."""
    path = folder / name
    if path.exists() or path.is_symlink():
        path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    elif how == "link":
        os.symlink(str(payload), path)
    elif how == "folder":
        path.mkdir()
    elif how == "sparse":
        with path.open("wb") as f:
            f.truncate(int(payload))  # type: ignore[call-overload]
    else:
        path.write_bytes(payload if isinstance(payload, bytes) else str(payload).encode())
    return path


def safetensors_bytes(header: object, data: bytes = b"", length: int | None = None) -> bytes:
    """A .safetensors file from a header (any JSON, or raw bytes) and data; ``length`` lies."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def with_extra_tensor(base: Path, dest: Path, name: str) -> Path:
    """A variant whose weights hold one tensor more (``name``, which the model has no place for)."""
    from safetensors.torch import load_file, save_file

    folder = variant(base, dest)
    (folder / "model.safetensors").unlink()
    tensors = load_file(base / "model.safetensors")
    tensors[name] = tensors[next(iter(tensors))][:2].clone()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def with_renamed_tensor(base: Path, dest: Path, old: str, new: str) -> Path:
    from safetensors.torch import load_file, save_file

    folder = variant(base, dest)
    (folder / "model.safetensors").unlink()
    tensors = load_file(base / "model.safetensors")
    tensors[new] = tensors.pop(old)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def gguf_file(
    path: Path, blocks: int = 2, held_blocks: int = 2, context: int = 256, vocab: int = 8,
    rows: int = 8,
) -> Path:  # fmt: skip
    """A tiny llama GGUF: ``blocks`` claimed, ``held_blocks`` of tensors, ``vocab`` tokens and
    an embedding of ``rows`` rows."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(blocks)
    writer.add_context_length(context)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(32)
    writer.add_head_count(2)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(vocab)])
    writer.add_tensor("token_embd.weight", np.zeros((rows, HIDDEN), np.float32))
    for i in range(held_blocks):
        writer.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((HIDDEN, HIDDEN), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def patched(path: Path, offset: int, data: bytes, dest: Path) -> Path:
    """A copy of ``path`` with ``data`` written at ``offset``."""
    raw = bytearray(path.read_bytes())
    raw[offset : offset + len(data)] = data
    dest.write_bytes(bytes(raw))
    return dest
