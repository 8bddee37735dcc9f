"""Process-wide torch set-up: thread count, OpenMP policy, device and dtype choice.

On small VMs torch's default OpenMP spin-wait makes two threads several times slower than one,
and the GUI needs a core of its own: :func:`configure_threads` must run before torch is imported.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "bfloat16", "float16")


def default_threads(cores: int | None = None) -> int:
    """Torch threads for the model: leave one core to the GUI, one thread on 2-core machines."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores - 1) if cores > 2 else 1


def _threads_from_env() -> int | None:
    """``LLM_LENS_THREADS`` when it is a positive whole number, else None."""
    env = os.environ.get("LLM_LENS_THREADS", "")
    return int(env) if env.isdigit() and int(env) > 0 else None


def configure_threads(threads: int | None = None) -> int:
    """Set OpenMP to passive waiting and fix torch's intra-op thread count; returns the count.

    Environment overrides: ``LLM_LENS_THREADS``. ``OMP_WAIT_POLICY`` is only set when absent, and
    only takes effect if torch has not been imported yet.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    n = threads or _threads_from_env() or default_threads()
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


@contextmanager
def every_core() -> Iterator[int]:
    """Torch's intra-op threads on every core for the block, then as they were; yields the count.

    For work a person waits on while no run streams (a new layer's attention window at 8,192
    tokens: 0.3 s on one core of two, 0.2 s on both): the GUI's core is kept for the model's
    decoding, which shares the machine with the window's rendering, not for an answer the
    window is idle waiting for. ``LLM_LENS_THREADS`` fixes the count here too.
    """
    import torch

    before = torch.get_num_threads()
    wanted = before if _threads_from_env() else os.cpu_count() or before
    if wanted != before:
        torch.set_num_threads(wanted)
    try:
        yield wanted
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` picks CUDA, then MPS, then CPU; an explicit device that is absent is an error."""
    import torch

    from llm_lens.core.errors import ModelLoadError

    if device not in DEVICES and not device.startswith("cuda:"):
        raise ModelLoadError(f"unknown device {device!r}: choose one of {', '.join(DEVICES)}")
    has_mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps" if has_mps else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} was asked for, but this machine has no CUDA GPU")
    if device == "mps" and not has_mps:
        raise ModelLoadError("device 'mps' was asked for, but Apple MPS is not available here")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` is bfloat16 on CUDA and float32 elsewhere (bf16 changes greedy text on CPU)."""
    import torch

    from llm_lens.core.errors import ModelLoadError

    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ModelLoadError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)  # type: ignore[no-any-return]


def synchronize(device: torch.device) -> None:
    """Wait for queued device work so wall-clock timings measure the model, not the launch."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def param_dtype(model: Any) -> torch.dtype:
    """The dtype of a model's weights (inputs to its modules must match it)."""
    return next(model.parameters()).dtype  # type: ignore[no-any-return]


def release_memory() -> bool:
    """Give the C heap's freed pages back to the system (glibc ``malloc_trim``); False where
    there is no glibc.

    A long prompt's forward pass frees gigabytes of activations, but glibc keeps freed blocks
    under its mmap threshold (which grows up to 32 MB as large blocks are freed) in the heap:
    after an 8,192-token run the process stayed 1.3 GB larger than what it still held
    (docs/performance-history.md, "Third pass"). Costs a walk of the free lists: milliseconds.
    """
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # musl or another libc
        return False
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True
