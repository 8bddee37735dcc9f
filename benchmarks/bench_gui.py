"""GUI responsiveness during a run: the longest gap of a 10 ms timer on the GUI thread, pane
repaint times, and start-up (window visible; first token) — printed, not asserted.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

T_START = time.perf_counter()
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from PySide6.QtCore import QElapsedTimer, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402


def main() -> int:
    app = QApplication(sys.argv[:1])
    from desktop.app import apply_theme
    from desktop.main_window import MainWindow

    apply_theme(app)
    win = MainWindow()
    win.sessions.confirm_close = False
    win.resize(1600, 1000)
    win.show()
    app.processEvents()
    visible_s = time.perf_counter() - T_START
    for dock in win.docks.values():  # every pane visible: undock none, but un-tabify
        dock.setVisible(True)
    gaps: list[float] = []
    clock = QElapsedTimer()
    ticker = QTimer(interval=10)
    state = {"measuring": False, "loaded_at": 0.0, "first_token": 0.0}

    def tick() -> None:
        if state["measuring"]:
            gaps.append(clock.restart())

    ticker.timeout.connect(tick)
    ticker.start()
    ctl = win.controller

    def loaded(_info: object) -> None:
        state["loaded_at"] = time.perf_counter()
        # a person reads the window for a moment: the vocabulary projection is drawn by then
        QTimer.singleShot(3000, start_run)

    def start_run() -> None:
        from core.sampling import GREEDY

        state["loaded_at"] = time.perf_counter()
        for pane in win.panes.values():
            pane.render_times_ms.clear()
        state["measuring"] = True
        clock.start()
        ctl.request_run("Explain transformers like I am 12", True, GREEDY, 64)

    def steps() -> None:
        if not state["first_token"]:
            state["first_token"] = time.perf_counter() - state["loaded_at"]

    def finished(summary: object) -> None:
        QTimer.singleShot(1500, app.quit)  # let the last analyses arrive and repaint

    ctl.sig_model_loaded.connect(loaded)
    ctl.sig_steps_changed.connect(steps)
    ctl.sig_run_finished.connect(finished)
    win.load(None)
    app.exec()
    renders = [t for p in win.panes.values() for t in p.render_times_ms]
    print(f"window visible after launch        {visible_s * 1e3:8.0f} ms")
    print(f"first token after model loaded      {state['first_token'] * 1e3:8.0f} ms")
    print(
        f"10 ms timer: ticks {len(gaps)}, longest gap {max(gaps):.0f} ms, "
        f"p99 {sorted(gaps)[int(len(gaps) * 0.99)]:.0f} ms, median {statistics.median(gaps):.0f} ms"
    )
    print(
        f"pane repaints: {len(renders)}, median {statistics.median(renders):.1f} ms, "
        f"max {max(renders):.1f} ms"
    )
    for name, pane in win.panes.items():
        t = pane.render_times_ms
        if t:
            print(
                f"  {name:12s} n={len(t):3d} median {statistics.median(t):6.1f} ms "
                f"max {max(t):6.1f} ms"
            )
    win.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
