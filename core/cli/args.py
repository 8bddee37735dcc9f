"""What every headless command shares: an argument parser whose mistakes are one line, and the
one guard that turns anything that goes wrong into one line on stderr:

- the model computed NaN or Inf (:class:`NonFiniteError`): where it first did, exit status 1
  (the input was fine; the model's numbers are not);
- a user mistake (:class:`LensError`, an unreadable or unwritable file, running out of memory):
  the message, exit status 2;
- Ctrl+C: the run stops between steps, nothing half-done is written, exit status 130;
- a bug (any other exception): what was being done and the error in one line, the traceback in a
  log file whose path the line names (:mod:`llm_lens.core.crashlog`), exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

from llm_lens.core.errors import LensError, NonFiniteError

INTERRUPTED = 130
BROKEN_MODEL = 1  # the exit status when the model computed NaN or Inf
T = TypeVar("T")
_doing = ["starting"]


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake raises :class:`LensError` instead of printing a block."""

    def error(self, message: str) -> NoReturn:
        raise LensError(message)


def doing(what: str) -> None:
    """Say what the command is doing now, for the line shown if it fails unexpectedly."""
    _doing[0] = what


def finite_float(text: str) -> float:
    """An argparse type: a finite number (``nan``, ``inf`` and ``1e400`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def seed_int(text: str) -> int:
    """An argparse type: a whole number from 0 to 2**64 - 1 (torch's generator takes an
    unsigned 64-bit seed)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text[:40]!r}") from None
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"must be from 0 to 2**64 - 1, got {text[:40]!r}")
    return value


def token_count(text: str) -> int:
    """An argparse type: a count of tokens, at least 1; ``1e30`` and ``1000000000`` are taken
    (the run caps them at the model's context, saying so), ``nan``, ``0`` and ``-1`` are not."""
    try:
        value = float(text) if any(c in text for c in ".eE") else int(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text[:40]!r}") from None
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text[:40]!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text[:40]!r}")
    return int(min(value, 2**62))


def cap_new_tokens(asked: int, prompt_tokens: int, context: int) -> int:
    """``asked`` new tokens, or as many as the model's context leaves after the prompt, with
    one line on stderr saying so, even with ``--quiet`` (a run past its context cannot be
    computed, and memory grows with every step)."""
    room = max(1, context - prompt_tokens)
    if context <= 0 or asked <= room:  # 0: the context is unknown (a server that does not say)
        return asked
    print(  # a warning, not progress: --quiet keeps it
        f"llm-lens: --max-new-tokens {asked} is past the model's context of {context} "
        f"tokens ({prompt_tokens} in the prompt): capped at {room}",
        file=sys.stderr,
    )
    return room


@contextlib.contextmanager
def ctrl_c_cancels(cancel: threading.Event) -> Iterator[None]:
    """While inside: the first Ctrl+C sets ``cancel`` (the loop stops between steps), a second
    one interrupts at once. Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: object) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if cancel.is_set():
        raise KeyboardInterrupt


def cancellable(work: Callable[[threading.Event], T]) -> tuple[T, threading.Event]:
    """``work(cancel)`` (a generation loop) with Ctrl+C setting ``cancel``: the loop stops between
    steps, then :class:`KeyboardInterrupt` leaves (exit 130 in :func:`guarded`, nothing written).
    Returns the work's result and the event, for later work that Ctrl+C should also stop."""
    cancel = threading.Event()
    with ctrl_c_cancels(cancel):
        return work(cancel), cancel


def guarded(command: str, body: Callable[[], int]) -> int:
    """Run one command; whatever goes wrong is one line on stderr (see the module docstring);
    ``--help`` exits 0."""
    doing(f"running llm-lens {command}")
    try:
        return body()
    except KeyboardInterrupt:
        _say(command, "interrupted (Ctrl+C); stopped, nothing was written")
        return INTERRUPTED
    except NonFiniteError as exc:
        _say(command, f"error: {exc}")
        return BROKEN_MODEL
    except (LensError, OSError) as exc:
        _say(command, f"error: {exc}")
        return 2
    except MemoryError:
        _say(command, f"error: ran out of memory while {_doing[0]}")
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except Exception as exc:  # a bug: one line here, the traceback in a log file
        from llm_lens.core.crashlog import report_crash

        _say(command, report_crash(_doing[0], exc))
        return 2


def add_placement(p: argparse.ArgumentParser) -> None:
    """``--device-map``, ``--max-memory``, ``--quantize``: a model bigger than one device, spread
    by accelerate over GPUs, CPU and disk, or with 8/4-bit weights (:mod:`..placement`)."""
    from llm_lens.core.placement import DEVICE_MAPS, MAX_MEMORY_HELP, QUANTIZE

    p.add_argument(
        "--device-map", choices=DEVICE_MAPS, default=None,
        help="spread the layers over GPUs, CPU and (last) disk with accelerate's device map",
    )  # fmt: skip
    p.add_argument("--max-memory", type=_max_memory, default=None, help=MAX_MEMORY_HELP)
    p.add_argument(
        "--quantize", choices=QUANTIZE, default=None,
        help="8/4-bit weights: int8, int4 (optimum-quanto; CPU, CUDA, MPS), nf4 (CUDA)",
    )  # fmt: skip


def _max_memory(text: str) -> tuple[tuple[str, int], ...]:
    from llm_lens.core.placement import parse_max_memory

    try:
        return parse_max_memory(text)
    except LensError as exc:  # argparse names the option itself
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--max-memory: ")) from None


def placement(args: argparse.Namespace) -> Any:
    """The :class:`~llm_lens.core.placement.Placement` the options of :func:`add_placement`
    name (the default: one device, weights as they are)."""
    from llm_lens.core.placement import Placement

    return Placement(
        device_map=getattr(args, "device_map", None),
        max_memory=getattr(args, "max_memory", None) or (),
        quantize=getattr(args, "quantize", None),
    )


def _say(command: str, line: str) -> None:
    text = f"llm-lens {command}: {line}".replace("\n", " ")
    print(text.encode("utf-8", "backslashreplace").decode("utf-8"), file=sys.stderr)
