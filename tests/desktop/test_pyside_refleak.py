"""PySide6 6.12.0 on CPython 3.11 leaks a reference to None per C++→Python virtual call, and a
long-running app then aborts in ``none_dealloc``. pyproject excludes that release; this test
catches any Qt binding that brings the leak back. It runs in a fresh process so that other
tests' live widgets cannot move the count.
"""

from __future__ import annotations

import subprocess
import sys

PROBE = r"""
import os, sys
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QApplication

class Ticker(QObject):
    ticks = 0
    def timerEvent(self, event):
        self.ticks += 1

app = QApplication([])
ticker = Ticker()
ticker.startTimer(0)
for _ in range(50):
    app.processEvents()
before, start = sys.getrefcount(None), ticker.ticks
while ticker.ticks < start + 1000:
    app.processEvents()
print(sys.getrefcount(None) - before, ticker.ticks - start)
"""


def test_no_none_refcount_drift_over_a_thousand_timer_events():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    drift, calls = (int(x) for x in out.stdout.split())
    assert calls >= 1000
    # a leaking binding loses one reference per call (about −1,000 here)
    assert abs(drift) < 50, f"None refcount drifted by {drift} over {calls} virtual calls"
