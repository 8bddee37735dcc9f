"""What an unexpected failure leaves behind: one line for the person, a log file for the bug report.

A bug must never show up as a raw traceback on the terminal or as a dead window. The CLI's guard
and the window's worker both call :func:`report_crash`: the full traceback goes to a log file
under the user's log folder (``$LLM_LENS_LOG_DIR`` overrides it) and the returned line names what
was being done, the error, and where the details are.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
import traceback
from pathlib import Path

LOG_ENV = "LLM_LENS_LOG_DIR"


def log_dir() -> Path:
    """``$LLM_LENS_LOG_DIR``, else the platform's user log folder for llm-lens."""
    env = os.environ.get(LOG_ENV)
    if env:
        return Path(os.path.expanduser(env))
    import platformdirs

    return Path(platformdirs.user_log_dir("llm-lens", appauthor=False))


def short(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"


def write_log(doing: str, exc: BaseException) -> Path | None:
    """Write the traceback of ``exc`` (raised while ``doing``) to a new log file; its path, or
    None when no log can be written (then the line says so, and nothing else fails)."""
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S")
    try:
        folder = log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"crash-{stamp}-{os.getpid()}.log"
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        header = (
            f"llm-lens crash log\nwhile: {doing}\nargv: {sys.argv!r}\n"
            f"python: {sys.version.split()[0]} on {platform.platform()}\n\n"
        )
        with open(path, "x", encoding="utf-8", errors="backslashreplace") as f:
            f.write(header + details)
    except (OSError, RuntimeError):
        return None
    return path


def report_crash(doing: str, exc: BaseException) -> str:
    """One line for an unexpected ``exc`` raised while ``doing``, naming the log written."""
    log = write_log(doing, exc)
    where = f"details in {log}" if log else "no log could be written"
    return f"unexpected error while {doing}: {short(exc)} ({where})"
