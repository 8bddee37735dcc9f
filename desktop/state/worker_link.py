"""The GUI's end of the model thread: the thread, the worker living on it, and the queued
signals that carry requests there.

Owned by the :class:`~llm_lens.desktop.state.controller.Controller` as ``controller.link``; the
controller subscribes to the worker's signals itself (``controller.worker``). Nothing here sets
a field of the worker: requests are queued signals, and what cannot wait behind the queue
(cancel, closing, "something is wanted") goes through the worker's
:class:`~llm_lens.core.runs.flags.WorkerFlags`.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QThread, Signal

from llm_lens.core.runs.flags import WorkerFlags
from llm_lens.core.runs.workbench import RunRequest
from llm_lens.desktop.model_thread.worker import Worker


class WorkerLink(QObject):
    """The model thread (``model_thread``, started by :meth:`start`) and its ``worker``.

    Its signals are private: they queue the requests onto the model thread, in the order
    they were made.
    """

    _load_requested = Signal(object, str, str, object, bool)  # … a Placement or None
    _run_requested = Signal(object)  # a RunRequest
    _serve_requested = Signal()
    _server_requested = Signal(object)  # a ServerSpec
    _stream_requested = Signal(int, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model_thread = QThread()
        self.model_thread.setObjectName("llm-lens-model")
        self.worker = Worker(WorkerFlags(wait_for_panes=True))
        self.worker.moveToThread(self.model_thread)
        self._load_requested.connect(self.worker.load)
        self._run_requested.connect(self.worker.run)
        self._serve_requested.connect(self.worker.serve)
        self._stream_requested.connect(self.worker.stream)
        self._server_requested.connect(self.worker.open_server)

    @property
    def flags(self) -> WorkerFlags:
        """What the model thread reads between steps (cancel, wanted, closing, the run shown)."""
        return self.worker.flags

    def start(self) -> None:
        self.model_thread.start()

    def load(
        self,
        spec: str | None,
        device: str,
        dtype: str,
        placement: Any = None,
        allow_partly_random: bool = False,
    ) -> None:
        """Load a model (``placement``: a core ``Placement`` or None); a running generation
        ends first and the load queues behind it."""
        self.flags.cancel_run()
        self.flags.want()
        self._load_requested.emit(spec, device, dtype, placement, allow_partly_random)

    def open_server(self, spec: Any) -> None:
        """Open a served model (see ``Worker.open_server``), behind any running generation."""
        self.flags.cancel_run()
        self.flags.want()
        self._server_requested.emit(spec)

    def run(self, request: RunRequest) -> None:
        """Start a live run (see ``Worker.run``)."""
        self.flags.want()
        self._run_requested.emit(request)

    def stream(self, job_id: int, job: Any) -> None:
        """Run a streaming job (see ``Worker.stream``)."""
        self.flags.want()
        self._stream_requested.emit(job_id, job)

    def serve(self) -> None:
        """Let the worker run the jobs queued with ``worker.submit``."""
        self._serve_requested.emit()

    def shutdown(self, timeout_ms: int) -> None:
        """Cancel any run and stop the thread (it finishes the step it is in)."""
        self.flags.close()  # analyses deferred to the run's end are not wanted now
        self.flags.stop()
        self.model_thread.quit()
        self.model_thread.wait(timeout_ms)
