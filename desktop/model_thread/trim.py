"""When the model thread gives its freed heap back: after delays, so glibc's trim (which holds
the heap's lock) does not land while the window draws what it was just sent.

A run's end asks for ``TRIM_DELAY_MS``, long analyses' last answer for ``TRIM_AFTER_ANSWER_MS``,
work ahead for ``TRIM_IDLE_MS`` (see :mod:`llm_lens.desktop.model_thread.worker`): each time
the window is drawing what it was just sent, and the trim made it wait (a full context's map
drawn in 72-85 ms instead of 40). A delay ends only when the thread's event loop runs, so a run's
end's was due the moment the prompt's analyses were served, 4 s later: exactly when their answer
was drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractEventDispatcher, QObject, QTimer, Slot


class AfterDelays(QObject):
    """Calls ``callback`` once the last of the delays asked for so far is over: a delay asked
    while others run supersedes them, whichever ends first. One-shot timers, not one restarted
    timer object (that one would outlive the thread); a child of the object whose thread runs
    the callback, so it moves with it and goes with it."""

    def __init__(self, callback: Callable[[], Any], parent: QObject) -> None:
        super().__init__(parent)
        self._callback = callback
        self._asked = self._over = 0

    def ask(self, delay_ms: int) -> None:
        self._asked += 1
        QTimer.singleShot(delay_ms, self._one_over)

    @Slot()
    def _one_over(self) -> None:
        self._over += 1
        if self._over == self._asked:
            self._callback()


def has_event_loop() -> bool:
    """Whether this thread runs a Qt event loop (a script driving the worker has none)."""
    return QAbstractEventDispatcher.instance() is not None


class HeapTrim:
    """Calls ``release`` once the last delay asked for is over, unless ``busy()`` then (a
    request waits: its serve asks again); at once on a thread with no event loop. ``owed``:
    a trim was asked for and has not happened since."""

    def __init__(self, release: Callable[[], None], busy: Callable[[], bool], parent: QObject):
        self._release, self._busy = release, busy
        self._after = AfterDelays(self._if_idle, parent)
        self.owed = False

    def later(self, delay_ms: int) -> None:
        """Give the freed heap back ``delay_ms`` after now, or once every delay asked before is
        over where one ends later."""
        self.owed = True
        if not has_event_loop():
            self._release()
            return
        self._after.ask(delay_ms)

    def _if_idle(self) -> None:
        if not self._busy():
            self._release()
