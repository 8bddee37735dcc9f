"""Per-step clocks of the model thread: wall time, and how much of it the thread spent off the CPU.

A thread that waits for the GIL (a window's GUI thread painting) sleeps: its CPU time stands
still while the wall clock runs. So does a thread that is ready to run while another thread or
process holds every core; Linux counts that time apart (``/proc/thread-self/schedstat``, the run
queue delay), so the two waits can be told apart there. With one CPU thread doing the model's
work, wall minus thread CPU time is the waiting. With several torch threads the model's work
happens on other threads, and the difference would count it as waiting, so it is not measured.
On a GPU the work happens on the device; whether the thread stays on the CPU while it waits for
the device (a CUDA context spins by default when the machine has more cores than contexts) or
sleeps is the runtime's choice, so it is measured once when the model loads (:func:`off_cpu_share`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from llm_lens.core.records import StepTiming

SCHEDSTAT = "/proc/thread-self/schedstat"  # cpu ns, run-queue wait ns, slices

Mark = tuple[float, float, float]  # wall s, thread CPU s, run-queue wait s


# a device's round trip may leave the thread blocked for at most this share of its wall time
SOUND_SHARE = 0.05


def measures_waits(device: Any, threads: int, device_checked: bool | None = None) -> bool:
    """True where wall minus thread CPU time is the model thread's waiting: one CPU thread, or
    another device where ``device_checked`` (:func:`off_cpu_share` under ``SOUND_SHARE``)."""
    if getattr(device, "type", str(device)) == "cpu":
        return threads == 1
    return bool(device_checked)


def off_cpu_share(work: Callable[[], Any], calls: int = 4) -> float:
    """The least share of ``work``'s wall time, over ``calls`` calls after an unmeasured one,
    that this thread spent blocked off the CPU (waiting for a core not counted).

    Near 0 where ``work`` (the model's forward and a copy of its logits to the host) keeps the
    thread on the CPU until the device is done; near 1 where it sleeps while the device works.
    The least call, so that another thread taking the GIL during one call does not decide it.
    """
    clock = StepClock(True)
    try:
        work()
        shares = []
        for _ in range(calls):
            start = clock.mark()
            work()
            wall, off, queued = clock.split(start, clock.mark())
            shares.append((off - queued) / wall if wall > 0 else 1.0)
    finally:
        clock.close()
    return min(shares)


class StepClock:
    """Marks on the thread that made it; ``split`` gives the wall, off-CPU and run-queue ms
    between two marks. ``close`` releases the schedstat file."""

    def __init__(self, waits: bool) -> None:
        self._waits = waits
        self._fd: int | None = None
        if waits:
            try:
                self._fd = os.open(SCHEDSTAT, os.O_RDONLY)  # this thread's: opened here
            except OSError:  # not Linux, or no scheduler statistics: the queue is not told apart
                self._fd = None

    @property
    def waits(self) -> bool:
        """Whether this clock measures the thread's waits."""
        return self._waits

    def mark(self) -> Mark:
        """(wall s, thread CPU s, run-queue wait s) now; zeros for what is not measured."""
        if not self._waits:
            return time.perf_counter(), 0.0, 0.0
        return time.perf_counter(), time.thread_time(), self._queued()

    def _queued(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            return int(os.pread(self._fd, 64, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    def split(self, start: Mark, end: Mark) -> tuple[float, float, float]:
        """(wall ms, off-CPU ms, of which waiting for a core ms) from ``start`` to ``end``."""
        wall = (end[0] - start[0]) * 1e3
        if not self._waits:
            return wall, 0.0, 0.0
        off = min(wall, max(0.0, wall - (end[1] - start[1]) * 1e3))
        queued = min(off, max(0.0, (end[2] - start[2]) * 1e3))
        return wall, off, queued

    def timing(
        self, marks: tuple[Mark, Mark, Mark, Mark], between: float, forward_ms: float | None
    ) -> StepTiming:
        """A step's timing from its marks before the forward, after it, after sampling and after
        the record; ``forward_ms`` stands for the forward where a run's start had already read
        it, and ``between`` is the ms since the step before was handed over."""
        m0, m1, m2, m3 = marks
        forward = self.split(m0, m1) if forward_ms is None else (forward_ms, 0.0, 0.0)
        sample, capture = self.split(m1, m2), self.split(m2, m3)
        queued = forward[2] + sample[2] + capture[2]
        return StepTiming(
            forward[0], sample[0], capture[0], forward[1], sample[1], capture[1], between, queued,
            waits_measured=self._waits,
        )  # fmt: skip

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
