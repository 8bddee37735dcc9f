"""Python's cyclic garbage collector runs only on the GUI thread while a model thread exists.

Automatic collection runs in whichever thread happens to allocate, and the model thread
allocates a lot. If it frees a Qt wrapper caught in a reference cycle there (the window's
widgets make thousands), that object's C++ destructor runs off the GUI thread and can deadlock
against the GUI thread deleting its window (seen: ``QObject::~QObject`` on the model thread
waiting for the GIL, the GUI thread in ``runDeletionInMainThread`` waiting for a Qt mutex).
pyqtgraph's ``GarbageCollector`` is the same remedy; this one counts its users and gives
automatic collection back when the last one stops.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500
_users = 0
_was_enabled = True


class GuiThreadCollector(QObject):
    """Turns automatic collection off and collects by generation thresholds on a GUI timer."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        global _users, _was_enabled
        if _users == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _users += 1
        self._active = True
        self.threshold = gc.get_threshold()
        self._timer = QTimer(self, interval=INTERVAL_MS)
        self._timer.timeout.connect(self.check)
        self._timer.start()
        self.destroyed.connect(_release)

    def check(self) -> None:
        """Collect the generations whose counts passed their thresholds, as gc would."""
        counts = gc.get_count()
        for generation in range(3):
            if counts[generation] <= self.threshold[generation]:
                return
            gc.collect(generation)

    def settle(self) -> None:
        """Collect everything once and freeze what survives (after a model load).

        A load leaves ~400,000 long-lived objects; without this, the next generation-1 and -2
        passes scan them all and pause the GUI for 90–320 ms, in the middle of a run. Frozen
        objects are never scanned again; unfreezing first lets a replaced model's cycles go.
        """
        gc.unfreeze()
        gc.collect()
        gc.freeze()

    def stop(self) -> None:
        """Stop collecting; automatic collection comes back when no collector is left."""
        if self._active:
            self._active = False
            self._timer.stop()
            self.destroyed.disconnect(_release)
            _release()


def _release(*_: object) -> None:
    global _users
    _users = max(0, _users - 1)
    if _users == 0:
        gc.unfreeze()  # what settle() froze may be collected again
        if _was_enabled:
            gc.enable()
