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
import errno
import json
import math
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
    """Where a command's ``--out`` goes: None for stdout (no option, or ``-``), a FIFO,
    /dev/null or a terminal as it is (:func:`stream_output`: written into, never replaced),
    else the checked :func:`write_target`. An empty name is refused, never taken as stdout."""
    if out is None or out == STDOUT:
        return None
    return stream_output(out) or write_target(out)


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
    prefix, _suffix = _tmp_parts(target)
    for tmp in target.parent.glob(f"{_glob_escape(prefix)}*{TMP_SUFFIX}*"):
        with contextlib.suppress(OSError):
            st = tmp.lstat()
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > older_than_s:
                tmp.unlink()
                removed.append(tmp)
    return removed


def _tmp_parts(target: Path) -> tuple[str, str]:
    """(prefix, suffix) of the temporary name beside ``target``: ``.NAME.`` cut short where a
    long name (a legal 255 bytes) would push the temporary one past the file system's limit."""
    suffix = TMP_SUFFIX + (target.suffix if len(target.suffix.encode()) <= 16 else "")
    try:
        name_max = os.pathconf(target.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    room = max(1, name_max - len(suffix.encode()) - 8 - 2)  # mkstemp's 8 random characters
    name = target.name.encode()[:room].decode("utf-8", "ignore")
    return f".{name}.", suffix


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], object]) -> Path:
    """Call ``write(tmp_path)`` to fill a temporary file beside ``path``'s target, then rename it
    over the target. Returns the file written (the link's target when ``path`` is a symlink)."""
    target = write_target(path)
    clean_stale(target)
    try:
        mode = target.stat().st_mode & 0o7777 if target.exists() else _new_file_mode()
        prefix, suffix = _tmp_parts(target)  # writers that pick a format by suffix still can
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=target.parent)
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


def _stream_ok(st: os.stat_result) -> bool:
    """A FIFO, /dev/null or a terminal: an output the user names to be written into, never
    replaced (any other device, a disk above all, is refused)."""
    if stat.S_ISFIFO(st.st_mode):
        return True
    if not stat.S_ISCHR(st.st_mode):
        return False
    null = os.stat(os.devnull)
    return st.st_rdev == null.st_rdev or os.major(st.st_rdev) in TERMINAL_MAJORS


TERMINAL_MAJORS = (4, 5, *range(136, 144))  # Linux: ttys, /dev/tty, pseudo-terminals


def stream_output(path: str | os.PathLike[str]) -> Path | None:
    """``path`` when it names (through links) a FIFO, /dev/null or a terminal, which an
    output is written into rather than replaced; None for anything else."""
    target = user_path(path)
    try:
        st = os.stat(target)
    except OSError:
        return None
    return target if _stream_ok(st) else None


def write_stream_text(path: Path, text: str) -> None:
    """Write ``text`` into a FIFO, /dev/null or a terminal. A FIFO that no one reads is refused
    at once (it would block for ever) rather than waited on."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise PathError(f"{path}: a FIFO that no one is reading; nothing written") from exc
        raise PathError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    try:
        os.set_blocking(fd, True)
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as f:
            f.write(text)
    except OSError as exc:
        raise PathError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    finally:
        os.close(fd)


NOT_FINITE = "_not_finite"  # the suffix of the key that says why a number beside it is null


def _reason(x: float) -> str:
    return "NaN" if math.isnan(x) else "Infinity" if x > 0 else "-Infinity"


def _bad(value: object) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def finite_json(data: object) -> object:
    """``data`` with each NaN or ±Inf written as None and its reason beside it: a key ``k``
    gets ``k_not_finite`` ("NaN", "Infinity" or "-Infinity"); a list under ``k`` gets
    ``k_not_finite`` as [[index, reason], …]. What any strict JSON parser (RFC 8259) reads."""
    if isinstance(data, dict):
        out: dict[object, object] = {}
        for key, value in data.items():
            out[key] = finite_json(value)
            if _bad(value):
                out[f"{key}{NOT_FINITE}"] = _reason(value)
            elif isinstance(value, list | tuple) and any(_bad(v) for v in value):
                out[f"{key}{NOT_FINITE}"] = [
                    [i, _reason(v)] for i, v in enumerate(value) if _bad(v)
                ]
        return out
    if isinstance(data, list | tuple):
        return [finite_json(v) for v in data]
    return None if _bad(data) else data


def strict_json(data: object, **options: object) -> str:
    """``json.dumps`` of :func:`finite_json` ``data``, refusing anything a strict parser would
    not read (``allow_nan=False`` as a last guard)."""
    return json.dumps(finite_json(data), allow_nan=False, **options)  # type: ignore[arg-type]


def first_not_finite(data: object, where: str = "") -> str | None:
    """The path ("runs/0/steps/3/entropy") of the first NaN or ±Inf in ``data``, or None."""
    items: list[tuple[object, object]] = []
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list | tuple):
        items = list(enumerate(data))
    elif _bad(data):
        return f"{where or '(the value)'} ({_reason(data)})"  # type: ignore[arg-type]
    for key, value in items:
        found = first_not_finite(value, f"{where}/{key}" if where else str(key))
        if found is not None:
            return found
    return None
