"""PySide6 6.12.0 on CPython 3.11 leaks a reference to None per C++→Python virtual call, and a
long-running app then aborts in ``none_dealloc``. pyproject excludes that release; this test
catches any Qt binding that brings the leak back.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, QTimerEvent


class _Ticker(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.ticks = 0

    def timerEvent(self, event: QTimerEvent) -> None:  # noqa: N802 (Qt override)
        self.ticks += 1


def test_no_none_refcount_drift_over_a_thousand_timer_events(qtbot):
    ticker = _Ticker()
    ticker.startTimer(0)
    qtbot.waitUntil(lambda: ticker.ticks >= 50, timeout=10_000)  # warm up caches
    before_refs, before_ticks = sys.getrefcount(None), ticker.ticks
    qtbot.waitUntil(lambda: ticker.ticks >= before_ticks + 1000, timeout=30_000)
    calls = ticker.ticks - before_ticks
    drift = sys.getrefcount(None) - before_refs
    assert calls >= 1000
    # a leaking binding loses one reference per call (−1,000 here); allow small noise
    assert abs(drift) < calls // 10, f"None refcount drifted by {drift} over {calls} calls"
