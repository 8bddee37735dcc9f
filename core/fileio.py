"""Safe writes: a temporary file beside the target, then a rename. A crash or a full disk never
leaves a half-written file and never destroys the previous one.

What the user named is what changes: a symlink is written through to its target (the link
stays a link), anything that is not a regular file (a device node, a FIFO, a directory) is
refused rather than replaced, the existing file's mode is kept (the umask's for a new file,
not ``mkstemp``'s 0600), and an empty name is refused. Temporary files of ours that a killed
write left beside the target (``.NAME.*.tmp``, with the target's suffix after it) are removed
on the next save.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from llm_lens.core.errors import LensError

TMP_SUFFIX = ".tmp"
STDOUT = "-"  # the ``--out`` name that means standard output
STALE_AFTER_S = 60.0  # a temporary file older than this belongs to a write that died


class PathError(LensError, OSError):
    """A path cannot be used as the user asked (unknown ``~user``, empty, not a regular file, no
    such folder); the message names the path and why."""


def user_path(path: str | os.PathLike[str]) -> Path:
    """``path`` with ``~`` expanded; an unknown ``~user`` or an empty name is one clear error."""
    text = os.fspath(path)
    if not text.strip():
        raise PathError("an empty file name was given")
    if "\x00" in text:
        raise PathError(f"{text!r}: a file name cannot hold a NUL character")
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        user = text[1:].split("/", 1)[0] or "the current user"
        raise PathError(f"{text}: no home folder for {user!r}")
    return Path(expanded)


def write_target(path: str | os.PathLike[str]) -> Path:
    """The regular file a write to ``path`` replaces: links resolved, anything else refused."""
    target = user_path(path)
    try:
        target = target.resolve(strict=False)  # write through symlinks to what they name
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise PathError(f"{path}: cannot be resolved ({exc})") from exc
    try:
        st = target.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise PathError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = _kind(st.st_mode)
        raise PathError(f"{path}: cannot write, not a regular file ({kind}); left as it is")
    if not target.parent.is_dir():
        raise PathError(f"{path}: cannot write, no such folder {target.parent}")
    return target


def output_target(out: str | None) -> Path | None:
    """Where a command's ``--out`` goes: None for stdout (no option, or ``-``), else the checked
    :func:`write_target`. An empty name is refused, never taken as stdout."""
    return None if out is None or out == STDOUT else write_target(out)


def _kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def _new_file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def clean_stale(target: Path, older_than_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove ``.NAME.*.tmp`` files of ours beside ``target`` left by a write that was killed."""
    removed: list[Path] = []
    now = time.time()
    for tmp in target.parent.glob(f".{_glob_escape(target.name)}.*{TMP_SUFFIX}*"):
        with contextlib.suppress(OSError):
            st = tmp.lstat()
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > older_than_s:
                tmp.unlink()
                removed.append(tmp)
    return removed


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], object]) -> Path:
    """Call ``write(tmp_path)`` to fill a temporary file beside ``path``'s target, then rename it
    over the target. Returns the file written (the link's target when ``path`` is a symlink)."""
    target = write_target(path)
    clean_stale(target)
    try:
        mode = target.stat().st_mode & 0o7777 if target.exists() else _new_file_mode()
        suffix = TMP_SUFFIX + target.suffix  # writers that pick a format by suffix still can
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    except OSError as exc:
        raise PathError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        raise PathError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
