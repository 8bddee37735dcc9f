"""What ``core/loading.py`` calls around a load: the folder checked before anything reads it,
transformers' log quiet while it loads, and a GGUF conversion published into the shared cache
safely when several first launches convert at once or one is killed half-way."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from llm_lens.core.guards.claims import check_folder_claims
from llm_lens.core.guards.files import check_model_folder

STALE_CONVERSION_S = 6 * 3600.0  # a .convert-* folder this old belongs to a killed launch


def guard_folder(folder: Path, spec: str) -> None:
    """A model folder's files checked (regular, sane sizes) and its claims held against its
    weights' headers, before transformers or LLM Lens opens any of them."""
    check_model_folder(folder, spec)
    check_folder_claims(folder, spec)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' logging at errors only while inside: its warnings ("MISSING … newly
    initialized", tokenizer notes) would turn a one-line failure into many; what they say
    is checked and said by LLM Lens itself."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        with _quiet_gguf_bar():
            yield
    finally:
        hf_logging.set_verbosity(before)


@contextlib.contextmanager
def _quiet_gguf_bar() -> Iterator[None]:
    """transformers' GGUF reader draws its own tqdm bar on stderr, whatever its logging says
    (LLM Lens reports the conversion's progress itself)."""
    import functools

    try:
        from transformers import modeling_gguf_pytorch_utils as reader
    except ImportError:  # no gguf support installed: nothing draws
        yield
        return
    bar = getattr(reader, "tqdm", None)
    if bar is None:
        yield
        return
    setattr(reader, "tqdm", functools.partial(bar, disable=True))  # noqa: B010
    try:
        yield
    finally:
        setattr(reader, "tqdm", bar)  # noqa: B010


def publish(tmp: Path, target: Path, complete: Callable[[Path], bool]) -> None:
    """Move a finished conversion ``tmp`` to ``target``, never replacing a complete one that
    another launch published meanwhile (it may be loading from it); an incomplete leftover is
    replaced. ``tmp`` is gone afterwards either way."""
    if target.exists() and not complete(target):
        shutil.rmtree(target, ignore_errors=True)  # a folder no conversion of ours finished
    try:
        os.rename(tmp, target)  # fails when target exists (not empty): the other launch won
    except OSError:
        if not complete(target):
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def clean_stale_conversions(models: Path) -> None:
    """Remove ``.convert-*`` folders a killed conversion left, once they are hours old."""
    now = time.time()
    for stale in models.glob(".convert-*"):
        with contextlib.suppress(OSError):
            if stale.is_dir() and now - stale.stat().st_mtime > STALE_CONVERSION_S:
                shutil.rmtree(stale)
