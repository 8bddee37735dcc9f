"""A Rust panic inside the tokenizers library, reported as one line.

``tokenizers`` runs its pre-tokenizer regexes in Oniguruma; a pattern that backtracks
catastrophically on the text ("retry-limit-in-match over") makes the library panic. The panic
reaches Python as ``pyo3_runtime.PanicException``, a ``BaseException`` that no ``except
Exception`` catches, and Rust's panic hook prints its own lines on the process's stderr first.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

from llm_lens.core.errors import PromptError


@contextlib.contextmanager
def tokenizer_panics(tokenizer_name: str) -> Iterator[None]:
    """Inside: a panic of the tokenizer's native code is a :class:`PromptError` naming it, and
    what the native code writes on file descriptor 2 meanwhile (the panic hook's lines) is
    dropped, so the user sees one line."""
    with _native_stderr_dropped():
        try:
            yield
        except BaseException as exc:
            if type(exc).__name__ != "PanicException":
                raise
            raise PromptError(panic_line(tokenizer_name, exc)) from None


def panic_line(tokenizer_name: str, exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    if "retry-limit" in text or "Regex" in text:
        return (
            f"the tokenizer of {tokenizer_name} failed on this text: a regular expression in "
            f"its pre-tokenizer exhausted the regex engine ({text})"
        )
    return f"the tokenizer of {tokenizer_name} crashed in its native code ({text})"


@contextlib.contextmanager
def _native_stderr_dropped() -> Iterator[None]:
    """File descriptor 2 pointed at a scratch file while inside (Python's own ``sys.stderr``
    is untouched unless it writes to that descriptor too)."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all (a windowed app): nothing to keep quiet
        yield
        return
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
