"""Model files read only when they are regular files of a sane size.

transformers opens ``config.json``, the tokenizer files and the weights wherever a model folder
names them. A FIFO there blocks the load for ever; a link to ``/dev/zero`` or ``/dev/urandom``
is read until memory runs out; a config of gigabytes is parsed whole. The folder is checked
first, by ``lstat``/``stat`` alone (nothing is opened), against the names LLM Lens and
transformers read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from llm_lens.core.errors import ModelLoadError

MAX_TEXT_BYTES = 256 * 2**20  # configs, tokenizer files, templates (a large tokenizer.json: 30 MB)
TEXT_FILES = (
    "config.json", "tokenizer_config.json", "processor_config.json", "generation_config.json",
    "special_tokens_map.json", "tokenizer.json", "added_tokens.json", "chat_template.jinja",
    "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model", "vocab.txt",
    "model.safetensors.index.json", "pytorch_model.bin.index.json", "llm-lens-source.json",
)  # fmt: skip
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


def check_model_folder(folder: str | os.PathLike[str], spec: str, weights: bool = True) -> None:
    """Refuse the folder when a file LLM Lens or transformers would read is not a regular file
    (after links) or a text file is larger than :data:`MAX_TEXT_BYTES`; one line naming it.
    ``weights`` False checks the text files only (the folder a ``.gguf`` lies in)."""
    root = Path(folder)
    for name in TEXT_FILES:
        check_regular(root / name, spec, MAX_TEXT_BYTES, missing_ok=True)
    if not weights:
        return
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise ModelLoadError(f"{spec}: cannot list the folder ({exc.strerror or exc})") from None
    for entry in entries:
        if entry.name.endswith(WEIGHT_SUFFIXES):
            check_regular(Path(entry.path), spec, None, missing_ok=False)


def check_regular(path: Path, spec: str, limit: int | None, missing_ok: bool) -> None:
    """``path`` (links followed) is a regular file of at most ``limit`` bytes, or one line."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if missing_ok and not path.is_symlink():
            return
        raise ModelLoadError(f"{spec}: {path.name} is missing (or a link to nothing)") from None
    except OSError as exc:
        raise ModelLoadError(f"{spec}: {path.name}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelLoadError(
            f"{spec}: {path.name} is {_kind(st.st_mode)}{_via_link(path)}, not a regular file; "
            "LLM Lens reads model files only when they are regular files"
        )
    if limit is not None and st.st_size > limit:
        raise ModelLoadError(
            f"{spec}: {path.name} is {st.st_size} bytes, more than a model's "
            f"{path.suffix or 'text'} file can sensibly be ({limit} bytes)"
        )


def _via_link(path: Path) -> str:
    if not path.is_symlink():
        return ""
    try:
        return f" (a link to {os.readlink(path)})"
    except OSError:
        return " (a link)"


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
    )  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a regular file")
