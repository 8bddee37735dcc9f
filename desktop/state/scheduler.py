"""One pane per event-loop turn: render, then paint, then give the loop back.

Each pane's own coalescing timer would fire in the same turn as the others, and their
renders and paints together (≈ 60 ms for nine pyqtgraph panes) would freeze the window that
long on every token. The scheduler spreads them out: a dirty pane is rendered at most every
``REPAINT_MS`` and never in the same turn as another.

While a run streams in, every render is Python on the GUI thread holding the GIL that the model
thread needs between the modules of each layer, so the window's work is what slows the model.
Then a pane renders its newest step (the controller's selection follows the run) at most every
``LIVE_MS`` (or its own slower ``live_interval_ms``), and after each unit the scheduler rests so
that the GUI thread's CPU time, all of it and not only the units (Qt paints some views after the
unit, the response text follows every token), stays within ``share`` of the time
(``GUI_SHARE``): a 10 ms unit, with 5 ms of other work since the last, is followed by 150 ms in
which no pane renders. (Tried and measured worse: letting each pane's rate
follow its own cost, so cheap panes stay live, with one unit's time of rest between units: the
same pane time per second, but the model thread waited 3–10 times as long for the GIL; see
docs/performance-history.md, "Second pass".) When the run ends the rest is dropped
(:meth:`RepaintScheduler.wake`) and every pane renders the final step at the normal rate: what
it shows then is the same as without the budget. Before a run's prefill the panes clear at the
normal rate too, while the model waits for them (:meth:`RepaintScheduler.when_idle`;
``Controller.preparing``).
"""

from __future__ import annotations

import math
import os
import time
import weakref
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer

REPAINT_MS = 33  # panes repaint at most ~30 times a second
LIVE_MS = 150  # while a run streams, a pane repaints at most this often
GUI_SHARE = 0.05  # while a run streams, the GUI thread's CPU time stays within this share


def _share_from_env() -> float:
    """``LLM_LENS_GUI_SHARE`` (0 < share ≤ 1) overrides ``GUI_SHARE``; anything else is ignored."""
    try:
        value = float(os.environ.get("LLM_LENS_GUI_SHARE", ""))
    except ValueError:
        return GUI_SHARE
    return value if 0.0 < value <= 1.0 else GUI_SHARE


class RepaintScheduler(QObject):
    """Round-robin renderer for panes; ``request(pane)`` marks one dirty.

    ``share``: while a run streams, the largest share of the GUI thread's time pane renders
    take (1.0: no rest between units). ``units``: (seconds, streaming) of each unit run, for
    the benchmark and tests.
    """

    def __init__(self, share: float | None = None) -> None:
        super().__init__()
        self.share = _share_from_env() if share is None else share
        self._dirty: dict[int, weakref.ref[Any]] = {}
        self._last: dict[int, float] = {}
        self._rest_until = 0.0  # no unit starts before this while a run streams
        self._mark: float | None = None  # the GUI thread's CPU time at the last unit's end
        self._idle: list[Any] = []  # callables to run once no pane is dirty
        self.units: list[tuple[float, bool]] = []
        self._timer = QTimer(self, singleShot=True)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)  # a coarse one fires up to 5 % early
        self._timer.timeout.connect(self._next)

    def request(self, pane: Any) -> None:
        key = id(pane)
        if key not in self._dirty:
            self._dirty[key] = weakref.ref(pane)
            pane.destroyed.connect(lambda *_: self._forget(key))
        if not self._timer.isActive():
            self._timer.start(0)

    def wake(self) -> None:
        """A run ended: drop the rest and the live rates; what is dirty renders now."""
        self._rest_until = 0.0
        self._mark = None
        self._last.clear()
        if self._dirty:
            self._timer.start(0)

    def when_idle(self, callback: Any) -> None:
        """Call ``callback`` once no pane is waiting to render (now, if none is)."""
        self._idle.append(callback)
        if not self._dirty:
            self._run_idle()

    def _run_idle(self) -> None:
        callbacks, self._idle = self._idle, []
        for callback in callbacks:
            callback()

    def _forget(self, key: int) -> None:
        self._dirty.pop(key, None)
        self._last.pop(key, None)

    def _next(self) -> None:
        now = time.monotonic()
        panes = {k: ref() for k, ref in self._dirty.items()}
        streaming = any(_streaming(p) for p in panes.values())
        if streaming and now < self._rest_until:
            self._timer.start(math.ceil((self._rest_until - now) * 1e3))
            return
        intervals = {k: _interval(p) for k, p in panes.items()}
        due = [k for k, gap in intervals.items() if now - self._last.get(k, 0.0) >= gap]
        if due:
            key = due[0]
            pane = self._dirty.pop(key)()
            self._last[key] = now
            if pane is not None:
                self._run(pane, streaming)
        if not self._dirty:
            self._run_idle()
        if self._dirty:  # wake when the soonest pane is due, and not in a rest: no spin
            now = time.monotonic()
            due_in = [intervals.get(k, 0.0) - (now - self._last.get(k, 0.0)) for k in self._dirty]
            soonest = min(due_in)
            if streaming:
                soonest = max(soonest, self._rest_until - now)
            self._timer.start(math.ceil(max(0.0, soonest) * 1e3))

    def _run(self, pane: Any, streaming: bool) -> None:
        """One unit; while streaming, rest afterwards so that the GUI thread's CPU time since
        the last unit ended (this unit and whatever else ran) stays within ``share``."""
        t0, cpu0 = time.monotonic(), time.thread_time()
        pane.render_and_paint()
        end, cpu = time.monotonic(), time.thread_time()
        self.units.append((end - t0, streaming))
        del self.units[:-1000]
        if streaming and self.share < 1.0:
            cpu_since = self._mark if self._mark is not None else cpu0
            used = max(end - t0, cpu - cpu_since)  # a unit's wall time at least (tests sleep)
            self._rest_until = t0 + used / self.share
        self._mark = cpu if streaming else None


def _streaming(pane: Any) -> bool:
    """True while the model thread of ``pane``'s controller is busy (a run streaming in), but
    not while a run waits for the panes to clear before its prefill."""
    if pane is None:
        return False
    ctl = pane.controller
    return bool(ctl.busy) and not getattr(ctl, "preparing", False)


def _interval(pane: Any) -> float:
    """Seconds between two renders of ``pane``: ``REPAINT_MS``, or ``LIVE_MS`` (the pane's
    slower ``live_interval_ms`` if it has one) while the model thread is busy."""
    if pane is None:
        return 0.0
    if not _streaming(pane):
        return REPAINT_MS / 1e3
    return max(REPAINT_MS, LIVE_MS, getattr(pane, "live_interval_ms", 0)) / 1e3


_scheduler: RepaintScheduler | None = None


def scheduler() -> RepaintScheduler:
    global _scheduler
    if _scheduler is None:
        _scheduler = RepaintScheduler()
    return _scheduler
