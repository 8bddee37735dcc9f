"""GUI responsiveness during a run: the longest gap of a 10 ms timer on the GUI thread, pane
render and paint times, garbage-collection pauses, and start-up (window visible; first token)
— printed, not asserted.

The window uses a fresh settings folder (the default layout, not whatever the last session left)
and splits the tabbed docks apart, so all nine panes are visible and painted during the run.
``--runs N`` repeats the run N times in the same window and prints each.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import threading
import time

T_START = time.perf_counter()
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ["LLM_LENS_CONFIG_DIR"] = tempfile.mkdtemp(prefix="llm-lens-bench-")

from PySide6.QtCore import QElapsedTimer, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

PROMPT = "Explain transformers like I am 12"
TOKENS = 64


class GcPauses:
    """Durations of the cyclic collector's passes on the GUI thread (gc.callbacks)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float, int]] = []  # (start, ms, generation)
        self._start = 0.0
        self._gui = threading.get_ident()
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if threading.get_ident() != self._gui:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            ms = (time.perf_counter() - self._start) * 1e3
            self.pauses.append((self._start, ms, info["generation"]))


def show_every_pane(win) -> None:  # noqa: ANN001
    """Take the tab groups apart: the nine panes in a 3 × 3 grid, all on screen at once."""
    docks = list(win.docks.values())
    horizontal, vertical = Qt.Orientation.Horizontal, Qt.Orientation.Vertical
    for dock in docks:
        win.removeDockWidget(dock)
    rows = [docks[i : i + 3] for i in range(0, len(docks), 3)]
    win.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, rows[0][0])
    for above, row in zip(rows[:-1], rows[1:], strict=True):  # first column, then each row
        win.splitDockWidget(above[0], row[0], vertical)
    for row in rows:
        for left, right in zip(row[:-1], row[1:], strict=True):
            win.splitDockWidget(left, right, horizontal)
    for dock in docks:
        dock.show()
    QApplication.processEvents()


def paints(pane) -> list[float]:  # noqa: ANN001
    """Paint times of the scheduler's units (zeros where the pane paints later, on its own)."""
    return getattr(pane, "paint_times_ms", None) or [0.0] * len(pane.render_times_ms)


def percentile(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * q))]


def report(run: int, gaps: list[tuple[float, float]], win, gc_pauses: list) -> None:  # noqa: ANN001
    ms = [g for _, g in gaps]
    longest_at, longest = max(gaps, key=lambda g: g[1])
    in_gc = [p for p in gc_pauses if longest_at - longest / 1e3 <= p[0] <= longest_at]
    gc_note = f" (a {in_gc[0][1]:.0f} ms gen-{in_gc[0][2]} GC pass in it)" if in_gc else ""
    print(
        f"run {run}: 10 ms timer: ticks {len(ms)}, longest gap {longest:.0f} ms{gc_note}, "
        f"p99 {percentile(ms, 0.99):.0f} ms, median {statistics.median(ms):.0f} ms"
    )
    start = gaps[0][0] - gaps[0][1] / 1e3
    worst = sorted(gaps, key=lambda g: -g[1])[:5]
    print("  longest gaps: " + ", ".join(f"{g:.0f} ms at {t - start:.2f} s" for t, g in worst))
    slow_gc = [p for p in gc_pauses if p[1] >= 10]
    total_gc = sum(p[1] for p in gc_pauses)
    print(
        f"  GC on the GUI thread: {len(gc_pauses)} passes, {total_gc:.0f} ms in all, "
        f"{len(slow_gc)} of 10 ms or more "
        f"({', '.join(f'{p[1]:.0f} ms gen {p[2]}' for p in slow_gc) or 'none'})"
    )
    renders = [t for p in win.panes.values() for t in p.render_times_ms]
    units = [
        r + p
        for pane in win.panes.values()
        for r, p in zip(pane.render_times_ms, paints(pane), strict=True)
    ]
    print(
        f"  pane updates: {len(renders)}; render median {statistics.median(renders):.1f} ms; "
        f"render + paint median {statistics.median(units):.1f} ms, max {max(units):.1f} ms"
    )
    for name, pane in win.panes.items():
        r, p = pane.render_times_ms, paints(pane)
        if r:
            print(
                f"    {name:12s} n={len(r):3d} render median {statistics.median(r):5.1f} "
                f"max {max(r):5.1f} | paint median {statistics.median(p):5.1f} "
                f"max {max(p):5.1f} ms"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    app = QApplication(sys.argv[:1])
    from llm_lens.desktop.app import apply_theme
    from llm_lens.desktop.main_window import MainWindow

    apply_theme(app)
    win = MainWindow()
    win.sessions.confirm_close = False
    win.resize(1920, 1200)
    win.show()
    show_every_pane(win)
    app.processEvents()
    visible_s = time.perf_counter() - T_START
    gaps: list[tuple[float, float]] = []
    clock = QElapsedTimer()
    ticker = QTimer(interval=10)
    state = {"measuring": False, "loaded_at": 0.0, "first_token": 0.0, "run": 0}
    collector = GcPauses()

    def tick() -> None:
        if state["measuring"]:
            gaps.append((time.perf_counter(), clock.restart()))

    ticker.timeout.connect(tick)
    ticker.start()
    ctl = win.controller

    def loaded(_info: object) -> None:
        print(f"window visible after launch        {visible_s * 1e3:8.0f} ms")
        # a person reads the window for a moment: the vocabulary projection is drawn by then
        QTimer.singleShot(3000, start_run)

    def start_run() -> None:
        from llm_lens.core.sampling import GREEDY

        for pane in win.panes.values():
            pane.render_times_ms.clear()
            paints(pane).clear()
        gaps.clear()
        collector.pauses.clear()
        state.update(measuring=True, loaded_at=time.perf_counter(), first_token=0.0)
        state["run"] += 1
        clock.start()
        ctl.request_run(PROMPT, True, GREEDY, TOKENS)

    def steps() -> None:
        if not state["first_token"]:
            state["first_token"] = time.perf_counter() - state["loaded_at"]

    def finished(_summary: object) -> None:
        QTimer.singleShot(1500, run_done)  # let the last analyses arrive and repaint

    def run_done() -> None:
        state["measuring"] = False
        if state["run"] == 1:
            print(f"first token after the run started  {state['first_token'] * 1e3:8.0f} ms")
        report(state["run"], gaps, win, collector.pauses)
        if state["run"] < args.runs:
            QTimer.singleShot(1000, start_run)
        else:
            app.quit()

    ctl.sig_model_loaded.connect(loaded)
    ctl.sig_steps_changed.connect(steps)
    ctl.sig_run_finished.connect(finished)
    win.load(None)
    app.exec()
    win.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
