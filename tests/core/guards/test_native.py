"""core/guards/native.py: a Rust panic of the tokenizers library (a BaseException) becomes one
PromptError line, and what the panic hook writes on file descriptor 2 is not shown."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llm_lens.core.errors import PromptError
from llm_lens.core.guards.native import panic_line, tokenizer_panics


class PanicException(BaseException):
    """Stands in for pyo3_runtime.PanicException (matched by name, as pyo3 defines it)."""


def test_a_panic_is_one_line():
    with pytest.raises(PromptError) as caught:
        with tokenizer_panics("M"):
            raise PanicException("Onig: Regex search error: retry-limit-in-match over")
    assert str(caught.value) == (
        "the tokenizer of M failed on this text: a regular expression in its pre-tokenizer "
        "exhausted the regex engine (Onig: Regex search error: retry-limit-in-match over)"
    )
    assert "crashed in its native code" in panic_line("M", PanicException("index out of bounds"))


def test_other_errors_pass_through():
    with pytest.raises(KeyboardInterrupt):
        with tokenizer_panics("M"):
            raise KeyboardInterrupt


CHILD = """
import os, sys
from llm_lens.core.guards.native import tokenizer_panics
with tokenizer_panics("M"):
    os.write(2, b"thread '<unnamed>' panicked at onig.rs\\n")
os.write(2, b"after\\n")
"""


def test_native_writes_on_fd_2_are_dropped_inside_only():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, env=dict(os.environ))
    assert done.returncode == 0 and done.stderr == b"after\n"
