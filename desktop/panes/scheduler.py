"""One pane per event-loop turn: render, then paint, then give the loop back.

Each pane's own coalescing timer would fire in the same turn as the others, and their
renders and paints together (≈ 60 ms for nine pyqtgraph panes) would freeze the window that
long on every token. The scheduler spreads them out: a dirty pane is rendered at most every
``REPAINT_MS`` and never in the same turn as another. Heavy panes may ask for a slower rate
while a run streams in (``live_interval_ms``); what they show when it ends is the same.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from PySide6.QtCore import QObject, QTimer

from llm_lens.desktop.controller import REPAINT_MS


class RepaintScheduler(QObject):
    """Round-robin renderer for panes; ``request(pane)`` marks one dirty."""

    def __init__(self) -> None:
        super().__init__()
        self._dirty: dict[int, weakref.ref[Any]] = {}
        self._last: dict[int, float] = {}
        self._timer = QTimer(self, singleShot=True)
        self._timer.timeout.connect(self._next)

    def request(self, pane: Any) -> None:
        key = id(pane)
        if key not in self._dirty:
            self._dirty[key] = weakref.ref(pane)
            pane.destroyed.connect(lambda *_: self._forget(key))
        if not self._timer.isActive():
            self._timer.start(0)

    def _forget(self, key: int) -> None:
        self._dirty.pop(key, None)
        self._last.pop(key, None)

    def _next(self) -> None:
        now = time.monotonic()
        intervals = {k: _interval(ref()) for k, ref in self._dirty.items()}
        due = [k for k, gap in intervals.items() if now - self._last.get(k, 0.0) >= gap]
        if due:
            key = due[0]
            pane = self._dirty.pop(key)()
            self._last[key] = now
            if pane is not None:
                pane.render_and_paint()
        if self._dirty:
            waits = [intervals.get(k, 0.0) - (now - self._last.get(k, 0.0)) for k in self._dirty]
            self._timer.start(max(0, int(min(waits) * 1e3)))


def _interval(pane: Any) -> float:
    """Seconds between two renders of ``pane``: ``REPAINT_MS``, or the pane's slower
    ``live_interval_ms`` while the model thread is busy (a run streaming in)."""
    if pane is None:
        return 0.0
    live = getattr(pane, "live_interval_ms", 0) if pane.controller.busy else 0
    return max(REPAINT_MS, live) / 1e3


_scheduler: RepaintScheduler | None = None


def scheduler() -> RepaintScheduler:
    global _scheduler
    if _scheduler is None:
        _scheduler = RepaintScheduler()
    return _scheduler
