"""``llm-lens --selftest --screenshots DIR``: after the selftest's run, each pane's dock raised
in turn, its analyses awaited, and the dock saved as ``DIR/<pane>.png`` (the whole window as
``DIR/window.png``), so every pane can be looked at for a given ``--window-size``.

``make screenshots`` runs it at 1366×768 and 1920×1080 into ``docs/screenshots/``.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer

POLL_MS = 100
QUIET_S = 1.2  # no analysis answered for this long: the raised pane has what it asked for
LEAST_S = 0.6  # a pane shown this long at least (its render, its first requests)
MOST_S = 30.0  # and at most this long (an analysis that never comes does not hang the run)


def file_name(title: str) -> str:
    """A pane's title as a file name: 'Why this token?' → 'why-this-token.png'."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") + ".png"


class PaneShots(QObject):
    """Raises each pane's dock in turn, waits until its analyses stop arriving, saves it.

    ``done(reason)`` is called once at the end: '' when every file was written, else why not.
    """

    def __init__(self, window: Any, folder: str | Path, done: Callable[[str], None]) -> None:
        super().__init__(window)
        self.window = window
        self.folder = Path(folder)
        self.done = done
        self.todo = [t for t in window.panes if t in window.docks]
        self.written: list[Path] = []
        self._shown_at = self._answered_at = 0.0
        self._timer = QTimer(self, interval=POLL_MS)
        self._timer.timeout.connect(self._poll)
        window.controller.sig_result.connect(self._on_result)

    def start(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.done(f"cannot make {self.folder}: {exc}")
            return
        self._next()

    def _on_result(self, *_: object) -> None:
        self._answered_at = time.monotonic()

    def _next(self) -> None:
        if not self.todo:
            self._timer.stop()
            self._save(self.window, "window.png")
            self.done("" if len(self.written) == len(self.window.docks) + 1 else "not all saved")
            return
        title = self.todo[0]
        dock = self.window.docks[title]
        dock.show()
        dock.raise_()
        self.window.panes[title].schedule()
        self._shown_at = self._answered_at = time.monotonic()
        self._timer.start()

    def _poll(self) -> None:
        now = time.monotonic()
        shown_for, quiet_for = now - self._shown_at, now - self._answered_at
        if shown_for < MOST_S and (shown_for < LEAST_S or quiet_for < QUIET_S):
            return
        self._timer.stop()
        title = self.todo.pop(0)
        pane = self.window.panes[title]
        pane.render_and_paint()  # the last answer drawn before the picture
        self._save(self.window.docks[title], file_name(title))
        self._next()

    def _save(self, widget: Any, name: str) -> None:
        path = self.folder / name
        if widget.grab().save(str(path), "PNG"):
            self.written.append(path)
            print(f"selftest: {path} ({widget.width()}×{widget.height()})", file=sys.stderr)
        else:
            print(f"selftest: could not write {path}", file=sys.stderr)
