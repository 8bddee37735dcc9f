"""What a window (or any caller on another thread) tells the thread that drives a
:class:`~llm_lens.core.runs.workbench.Workbench` without waiting behind its queue.

A queued "cancel" request would wait behind the running loop, so these are ``threading.Event``
objects the model's thread reads between steps. One :class:`WorkerFlags` is handed to the worker
when it is made; the caller changes it only through its methods.
"""

from __future__ import annotations

import threading


class WorkerFlags:
    """Cancellation, "something is wanted", closing, the panes' readiness, prefix reuse and the
    run the window shows: set from the GUI thread, read on the model thread."""

    def __init__(self, wait_for_panes: bool = False) -> None:
        self.cancel = threading.Event()  # the running generation stops between its steps
        self.load_cancel = threading.Event()  # a model load stops between its stages
        # a run, a load or a streaming job was asked for: work done ahead of requests stops
        self.wanted = threading.Event()
        self.closing = threading.Event()  # the window is closing: queued analyses are skipped
        # with ``wait_for_panes``: a live run's prefill starts once the panes have cleared for it
        # (at most ``workbench.READY_WAIT_S`` later), so the GUI's work stays out of its TTFT
        self.panes_ready: threading.Event | None = threading.Event() if wait_for_panes else None
        self._reuse_prefix = False
        self._shown_run_id = 0

    def cancel_run(self) -> None:
        """Stop the running generation at its next step."""
        self.cancel.set()

    def stop(self) -> None:
        """Stop the running generation (between steps) or model load (between stages)."""
        self.cancel.set()
        self.load_cancel.set()

    def want(self) -> None:
        """Something was asked for: guesses computed ahead of requests give way to it."""
        self.wanted.set()

    def nothing_wanted(self) -> None:
        """Guesses may run again (the model thread clears this itself when a job starts)."""
        self.wanted.clear()

    def close(self) -> None:
        """The window is closing: analyses still queued are not wanted any more."""
        self.closing.set()

    def panes_cleared(self) -> None:
        """The panes have cleared for the new run: its prefill may start."""
        if self.panes_ready is not None:
            self.panes_ready.set()

    @property
    def reuse_prefix(self) -> bool:
        """Whether a live run reads only the prompt suffix the last run's cache does not hold."""
        return self._reuse_prefix

    def set_reuse_prefix(self, on: bool) -> None:
        self._reuse_prefix = bool(on)

    @property
    def shown_run_id(self) -> int:
        """The run the window last asked analyses of: a guess for another run is not computed."""
        return self._shown_run_id

    def show(self, run_id: int) -> None:
        self._shown_run_id = int(run_id)
