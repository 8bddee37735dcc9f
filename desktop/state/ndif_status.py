"""Where an NDIF job stands, carried from the model thread to the window.

The NDIF engine reports each status update of a job (received, queued, running, completed,
error; :class:`~llm_lens.core.engines.ndif.status.JobStatus`) to a callback on the model
thread, while that thread is blocked waiting for the job. :meth:`NdifStatus.report` is that
callback: it only emits a signal, which Qt queues to the GUI thread, so the window's line
updates while the model thread waits and the GUI never does.
"""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtCore import QObject, Signal

STATES = {
    "RECEIVED": "the server received the job",
    "QUEUED": "queued",
    "PROVISIONING": "the server is provisioning the model",
    "DEPLOYING": "the server is deploying the model",
    "DISPATCHED": "dispatched to the model",
    "RUNNING": "running",
    "COMPLETED": "completed",
    "ERROR": "error",
}
POSITION = re.compile(r"(?:position|queue)\D{0,20}(\d+)", re.IGNORECASE)


def status_line(status: Any, where: str = "NDIF") -> str:
    """One line for a job's status: its state in words, the queue position where the server
    gave one, the server's own words for an error or a log message."""
    state = str(status.state).upper()
    words = STATES.get(state, state.lower())
    text = " ".join(str(status.description or "").split())
    if state == "QUEUED":
        found = POSITION.search(text)
        words += f" (position {found.group(1)})" if found else f" ({text})" if text else ""
    elif state in ("ERROR", "LOG") and text:
        words = f"{words}: {text}" if state == "ERROR" else f"log: {text}"
    return f"{where}: {words}"


class NdifStatus(QObject):
    """The job's statuses, as they come (any thread may call :meth:`report`).

    Signals:
        sig_status(object, str): the :class:`JobStatus` and its line (:func:`status_line`).
    """

    sig_status = Signal(object, str)

    def __init__(self, where: str = "NDIF", parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.where = where
        self.seen: list[str] = []  # the states the window was told, in order (GUI thread)
        self.sig_status.connect(self._note)

    def report(self, status: Any) -> None:
        """The engine's ``on_status``: queued to the GUI thread as ``sig_status``."""
        self.sig_status.emit(status, status_line(status, self.where))

    def _note(self, status: Any, _line: str) -> None:
        self.seen.append(str(status.state))
