"""The model's thread: a QObject living on one long-lived QThread that owns model and caches.

The GUI reaches it only through queued signals; cancellation of a running generation goes
through a ``threading.Event`` because a queued "cancel" slot would wait behind the loop.
Analysis requests that arrive during a run are served between steps.
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot


class Worker(QObject):
    """Loads models, runs generations and computes on-demand analyses.

    Signals:
        sig_loading(float, str): progress of a model load.
        sig_loaded(object): ``ModelInfo`` of the model now loaded.
        sig_run_started(int, object): run id and its ``PromptTokens``.
        sig_prefill(int, object): run id and its ``PrefillCapture``.
        sig_step(int, object): run id and a ``StepRecord``.
        sig_run_finished(int, object): run id and its ``RunSummary``.
        sig_result(str, object, object): analysis kind, request key, result record.
        sig_error(str, str): where it happened ("load", "run", "analysis") and the message.
    """

    sig_loading = Signal(float, str)
    sig_loaded = Signal(object)
    sig_run_started = Signal(int, object)
    sig_prefill = Signal(int, object)
    sig_step = Signal(int, object)
    sig_run_finished = Signal(int, object)
    sig_result = Signal(str, object, object)
    sig_error = Signal(str, str)

    def __init__(self) -> None:
        super().__init__()
        self.engine: Any = None
        self.runs: dict[int, Any] = {}
        self.cancel = threading.Event()
        self.load_cancel = threading.Event()
        self.pending: queue.Queue[tuple[str, Any, Callable[[], Any]]] = queue.Queue()

    @Slot(object, str, str)
    def load(self, spec: object, device: str, dtype: str) -> None:
        from core.engine import Engine
        from core.errors import LensError
        from core.loading import load_model

        self.load_cancel.clear()
        try:
            loaded = load_model(
                spec if isinstance(spec, str) else None, device, dtype, self._progress
            )
            self._progress(1.0, "ready")
            self.engine = Engine(loaded)
            self.runs.clear()
        except LensError as exc:
            self.sig_error.emit("load", str(exc))
            return
        except Exception as exc:  # a bug, not a user mistake: still never a traceback dialog
            traceback.print_exc()
            self.sig_error.emit("load", f"could not load the model: {exc}")
            return
        self.sig_loaded.emit(loaded.info)

    def _progress(self, fraction: float, message: str) -> None:
        """Report load progress; between stages, honour a cancel request (the previous model
        stays loaded)."""
        from core.errors import Cancelled

        if self.load_cancel.is_set():
            raise Cancelled("loading cancelled: the previous model is still loaded")
        self.sig_loading.emit(fraction, message)

    @Slot(int, str, bool, object, object)
    def run(self, run_id: int, text: str, chat: bool, params: object, config: object) -> None:
        from core.errors import LensError

        if self.engine is None:
            self.sig_error.emit("run", "no model is loaded yet")
            return
        self.cancel.clear()
        try:
            prompt = self.engine.tokenize(text, chat)
            run = self.engine.start(prompt, params, config, self.cancel)
            run.run_id = run_id
            self.runs = {run_id: run}
            self.sig_run_started.emit(run_id, prompt)
            for record in run:
                if record.index == 0:
                    self.sig_prefill.emit(run_id, run.prefill)
                self.sig_step.emit(run_id, record)
                self._serve_pending()
            self.sig_run_finished.emit(run_id, run.summary())
        except LensError as exc:
            self.sig_error.emit("run", str(exc))
        except Exception as exc:
            traceback.print_exc()
            self.sig_error.emit("run", f"the run failed: {exc}")

    def submit(self, kind: str, key: Any, job: Callable[[], Any]) -> None:
        """Queue an analysis job (any thread); it runs between steps or when idle."""
        self.pending.put((kind, key, job))

    @Slot()
    def serve(self) -> None:
        """Run queued analysis jobs now (connected to a queued signal from the GUI)."""
        self._serve_pending()

    def _serve_pending(self) -> None:
        import torch

        from core.errors import LensError

        while True:
            try:
                kind, key, job = self.pending.get_nowait()
            except queue.Empty:
                return
            try:
                with torch.inference_mode():
                    result = job()
            except (LensError, OSError, ValueError) as exc:  # bad file, full disk, no run
                self.sig_error.emit("analysis", f"{kind.replace('_', ' ')}: {exc}")
                continue
            except Exception as exc:
                traceback.print_exc()
                self.sig_error.emit("analysis", f"{kind}: {exc}")
                continue
            self.sig_result.emit(kind, key, result)
