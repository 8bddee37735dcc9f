"""The GUI-side hub: owns the worker thread, holds the records, coalesces updates for panes.

Panes subscribe to the controller, never to the worker, and write back only through its
``request_*`` methods.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from functools import partial
from typing import Any

from PySide6.QtCore import QObject, QThread, QTimer, Signal

from llm_lens.core.runs.flags import WorkerFlags
from llm_lens.core.runs.workbench import RunRequest
from llm_lens.desktop.model_thread.worker import Worker
from llm_lens.desktop.state.scheduler import REPAINT_MS


class Controller(QObject):
    """State of the exploration and the only way to talk to the model thread.

    Signals:
        sig_model_loading(float, str): load progress (fraction, message).
        sig_model_loaded(object): the new ``ModelInfo``; every pane should clear.
        sig_run_started(object): ``PromptTokens`` of the run that began.
        sig_steps_changed(): new step records arrived (coalesced to ~30 Hz).
        sig_run_finished(object): ``RunSummary`` of the run that ended.
        sig_selection_changed(int): the selected step index changed.
        sig_params_changed(object): sampling settings changed (``SamplingParams``).
        sig_result(str, object, object): an analysis result (kind, key, record) arrived.
        sig_error(str): a message for the user.
        sig_busy_changed(bool): a load or a run started (True) or ended (False).
        sig_session_changed(): a session was opened, or the shown run became a live one.
        sig_saved(str, int): a session was written (path, bytes).
        sig_head_requested(int, int): show this layer and head (a click in "why this token?").
        sig_explain_requested(int): explain this step's token (a "why?" on a token).
        sig_token_selected(int): the selected token changed (its context position, or -1);
            see :mod:`desktop.selection`.

    It is composed of parts with one job each: ``sessions``
    (:class:`~llm_lens.desktop.state.session_controller.SessionController`) shows reopened runs and
    saves, exports and opens files; ``compare``
    (:class:`~llm_lens.desktop.state.compare_controller.CompareController`) runs comparisons, beam
    searches, branches and continuations. This class holds what is shown (the run, its steps,
    the selected step, the sampler settings) and talks to the model thread.
    """

    sig_model_loading = Signal(float, str)
    sig_model_loaded = Signal(object)
    sig_run_started = Signal(object)
    sig_steps_changed = Signal()
    sig_run_finished = Signal(object)
    sig_selection_changed = Signal(int)
    sig_params_changed = Signal(object)
    sig_result = Signal(str, object, object)
    sig_error = Signal(str)
    sig_busy_changed = Signal(bool)
    sig_session_changed = Signal()
    sig_saved = Signal(str, int)
    sig_head_requested = Signal(int, int)
    sig_explain_requested = Signal(int)
    sig_token_selected = Signal(int)

    _load_requested = Signal(object, str, str)
    _run_requested = Signal(object)  # a RunRequest
    _serve_requested = Signal()
    _stream_requested = Signal(int, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        from llm_lens.core.sampling import SamplingParams

        self.info: Any = None  # the model of what is shown (a recorded run's model, or live)
        self.model_info: Any = None  # the model loaded on the worker
        self.recorded: Any = None  # RecordedAnalysis while a session's run is shown
        self.session: Any = None
        self.session_path: str | None = None
        self.session_index = -1  # the run of ``session`` shown
        self.dirty = False  # a live run not saved yet
        self.prompt: Any = None
        self.prefill: Any = None
        self.summary: Any = None
        self.steps: list[Any] = []
        self.selected = -1
        self.token = -1  # the selected token's position in prompt + response (desktop.selection)
        self.follow_live = True
        self.busy = False
        self.preparing = False  # a run started: the panes clear while its prefill waits
        self.params = SamplingParams()
        self.run_params = self.params  # the settings of the run shown
        self.run_id = 0
        self._ids = itertools.count(1)
        self._results: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._asked: set[tuple[Any, ...]] = set()
        self._thread = QThread()
        self._thread.setObjectName("llm-lens-model")
        # the window's only hold on the worker besides its signals: it never sets its fields
        self.worker = Worker(WorkerFlags(wait_for_panes=True))
        self.worker.moveToThread(self._thread)
        self._wire()
        self._flush = QTimer(self, singleShot=True, interval=REPAINT_MS)
        self._flush.timeout.connect(self.emit_steps)
        self._stream_requested.connect(self.worker.stream)
        from llm_lens.desktop.state.compare_controller import CompareController
        from llm_lens.desktop.state.gui_gc import GuiThreadCollector
        from llm_lens.desktop.state.session_controller import SessionController

        self._collector = GuiThreadCollector(self)  # never collect on the model thread

        self.sessions = SessionController(self)
        self.compare = CompareController(self)
        self._thread.start()

    def _wire(self) -> None:
        w = self.worker
        self._load_requested.connect(w.load)
        self._run_requested.connect(w.run)
        self._serve_requested.connect(w.serve)
        w.sig_loading.connect(self.sig_model_loading)
        w.sig_loaded.connect(self._on_loaded)
        w.sig_run_started.connect(self._on_run_started)
        w.sig_prefill.connect(self._on_prefill)
        w.sig_step.connect(self._on_step)
        w.sig_run_finished.connect(self._on_finished)
        w.sig_result.connect(self._on_result)
        w.sig_error.connect(self._on_error)

    # ----------------------------------------------------------------- requests
    def request_load(
        self, spec: str | None = None, device: str = "auto", dtype: str = "auto"
    ) -> None:
        self.worker.flags.cancel_run()  # a running generation ends first; the load queues behind
        self.worker.flags.want()
        self._set_busy(True)
        self._load_requested.emit(spec, device, dtype)

    def request_run(
        self,
        text: str,
        chat: bool,
        params: Any,
        max_new_tokens: int = 64,
        parse_special: bool = False,
    ) -> None:
        """Start a run; a running one is cancelled first and its late records are dropped.
        ``parse_special``: special-token text the user typed becomes control tokens."""
        from llm_lens.core.errors import LensError
        from llm_lens.core.loop.engine import RunConfig

        if self.model_info is None:
            self.sig_error.emit("no model is loaded yet")
            return
        try:
            config = RunConfig(max_new_tokens=max_new_tokens)
        except LensError as exc:
            self.sig_error.emit(str(exc))
            return
        self.request_stop()
        self.run_id = next(self._ids)
        self.run_params = params
        self.follow_live = True
        self._set_busy(True)
        self.worker.flags.want()
        self._run_requested.emit(RunRequest(self.run_id, text, chat, params, config, parse_special))

    def request_stop(self) -> None:
        """Cancel the running generation (between steps) or model load (between stages)."""
        self.worker.flags.stop()

    def request_select(self, index: int) -> None:
        if not self.steps:
            return
        index = max(0, min(index, len(self.steps) - 1))
        self.follow_live = index == len(self.steps) - 1
        if index != self.selected:
            self.selected = index
            self.sig_selection_changed.emit(index)

    def request_head(self, layer: int, head: int) -> None:
        """Ask the panes that show one head (Attention) to show this one."""
        self.sig_head_requested.emit(layer, head)

    def request_explain(self, index: int) -> None:
        """Select step ``index`` and ask for its "why this token?" view."""
        self.request_select(index)
        self.sig_explain_requested.emit(index)

    def request_select_token(self, position: int, with_step: bool = False) -> None:
        """Select the token at ``position`` of prompt + response in every pane (-1: none);
        ``with_step`` also selects the step that chose a response token."""
        from llm_lens.desktop.state.selection import select_token

        select_token(self, position, with_step)

    def request_params(self, params: Any) -> None:
        self.params = params
        self.sig_params_changed.emit(params)

    def current_step(self) -> Any:
        return self.steps[self.selected] if 0 <= self.selected < len(self.steps) else None

    def request_analysis(self, kind: str, **args: Any) -> Any:
        """The cached result of an analysis, or None after scheduling it on the worker.

        Kinds: ``lens`` (step), ``prompt_lens``, ``attention_map`` (layer, head),
        ``attention_overview``, ``embedding_projection``, ``hidden_paths``, ``neighbours``
        (token_id), ``positions`` (positions), ``explain`` (step, vs). The result arrives later
        through
        ``sig_result(kind, key, result)``. A run reopened from a session answers from its
        recording, or from the model when it matches.
        """
        flags = self.worker.flags
        flags.show(self.run_id)  # guesses computed ahead for another run are not wanted
        run_scoped = kind not in ("embedding_projection", "neighbours", "positions")
        scope = self.run_id if run_scoped else getattr(self.info, "weights_id", "")
        key = (kind, scope, *sorted(args.items()))
        if key in self._results:
            return self._results[key]
        if self.recorded is not None:
            stored = self.recorded.get(kind, args)
            if stored is not None or not self.model_matches():
                return stored
        if key not in self._asked and self.model_info is not None:
            self._asked.add(key)
            run_id, recorded = self.run_id, self.recorded

            def job(bench: Any, args: dict[str, Any] = args, ahead: bool = False) -> Any:
                from llm_lens.core.loop.analyses import compute  # on the model thread: values only

                if ahead and flags.shown_run_id != run_id:
                    return None  # a guess for a run no longer shown
                run = recorded.run if recorded is not None else bench.store.runs.get(run_id)
                return compute(kind, bench.engine, run, args)

            from llm_lens.core.loop.analyses import likely_next

            guesses = likely_next(kind, args, self.model_info)
            ahead = tuple(partial(job, args=nxt, ahead=True) for nxt in guesses)
            self.worker.submit(kind, key, job, ahead)
            self._serve_requested.emit()
        return None

    def waiting_text(self, what: str, computing: str) -> str:
        """What a pane says while an analysis (``what``, in words) has no answer yet:
        ``computing``, or why none will come (a run reopened without that view recorded and
        without its model loaded)."""
        if self.recorded is None or self.model_matches():
            return computing
        name = getattr(self.info, "name", "its model")
        return f"the {what} is not in this session file: load {name} to compute it"

    def cached_result(self, kind: str, scope: Any, **args: Any) -> Any:
        """An analysis result already computed (None if not), without scheduling anything."""
        return self._results.get((kind, scope, *sorted(args.items())))

    def show_recorded(self, session: Any, path: str | None, recorded: Any) -> None:
        """Make a session's run (``recorded``, a ``RecordedAnalysis``) the shown one; the
        caller announces it (``SessionController.show``)."""
        self._reset()
        self.session, self.session_path, self.dirty = session, path, False
        self.recorded = recorded
        run = recorded.run
        self.prompt, self.prefill, self.steps = run.prompt, run.prefill, list(run.steps)
        self.follow_live = True

    def recorded_run(self) -> Any:
        """The ``SessionRun`` shown, or None for a live run."""
        return None if self.recorded is None else self.recorded.run

    def model_matches(self) -> bool:
        """Whether the loaded model is the one a recorded run was made with."""
        live, shown = self.model_info, self.info
        return live is not None and shown is not None and live.weights_id == shown.weights_id

    # ----------------------------------------------------------------- other runs
    def new_run_id(self) -> int:
        """A fresh id (run ids and job ids share one counter)."""
        return next(self._ids)

    def request_stream(self, job_id: int, job: Any) -> None:
        """Run a streaming job on the worker (see ``Worker.stream``)."""
        self.worker.flags.want()
        self._stream_requested.emit(job_id, job)

    def request_serve(self) -> None:
        """Let the worker run the jobs queued with ``worker.submit``."""
        self._serve_requested.emit()

    def set_busy(self, busy: bool) -> None:
        self._set_busy(busy)

    def adopt_run(self, run_id: int, params: Any) -> None:
        """Make ``run_id`` the shown live run before a job streams it (a branch)."""
        self.request_stop()
        self.run_id = run_id
        self.run_params = params
        self.follow_live = True
        self._set_busy(True)

    def show_run(
        self, run_id: int, prompt: Any, prefill: Any, steps: Any, summary: Any, params: Any = None
    ) -> None:
        """Show a finished run made on the worker (a comparison column, a branch) in every pane
        as if it had just run live; analyses read the workbench's ``store.runs[run_id]``."""
        if self.busy:  # the live run's late records and end are dropped from now on
            self.request_stop()
            self._set_busy(False)
        self.run_id = run_id
        if self.info != self.model_info:
            self.info = self.model_info
            self.sig_model_loaded.emit(self.model_info)
        self.recorded = self.session = self.session_path = None
        self._reset()
        self.prompt, self.prefill, self.steps, self.summary = prompt, prefill, list(steps), summary
        self.run_params = params if params is not None else self.run_params
        self.follow_live, self.dirty = True, True
        self.sig_run_started.emit(prompt)
        self.sig_session_changed.emit()
        self.emit_steps()
        self.sig_run_finished.emit(summary)

    # ----------------------------------------------------------------- worker events
    def _on_loaded(self, info: Any) -> None:
        from llm_lens.core.runtime import configure_threads

        # this thread's torch work (the Sampling pane's stages) on the model's thread count,
        # fixed now: a thread keeps the count torch had when it first ran, and at that moment
        # the worker may be serving an analysis on every core (then: two threads for good,
        # beside the model's)
        configure_threads()
        self._collector.settle()
        self.sessions.forget_origin()  # its runs belong to another model
        self.info = self.model_info = info
        self.recorded = self.session = self.session_path = None
        self._reset()
        self._results.clear()
        self._asked.clear()
        self._set_busy(False)
        self.sig_model_loaded.emit(info)

    def _reset(self) -> None:
        self.steps, self.prompt, self.prefill, self.summary, self.selected = (
            [],
            None,
            None,
            None,
            -1,
        )
        self.token = -1

    def _on_run_started(self, run_id: int, prompt: Any) -> None:
        if run_id != self.run_id:
            return
        if self.info != self.model_info:  # a recorded run of another model was shown
            self.info = self.model_info
            self.sig_model_loaded.emit(self.model_info)
        self.recorded = self.session = self.session_path = None
        self._reset()
        model_wide = {k: v for k, v in self._results.items() if isinstance(k[1], str)}
        self._results = OrderedDict(model_wide)
        self._asked = {k for k in self._asked if isinstance(k[1], str)}
        self.prompt = prompt
        self.preparing = True  # the panes clear now, at their normal rate; then the prefill
        self.sig_run_started.emit(prompt)
        self.sig_session_changed.emit()
        from llm_lens.desktop.state.scheduler import scheduler

        scheduler().when_idle(lambda: self._panes_ready(run_id))

    def _panes_ready(self, run_id: int) -> None:
        """The panes have cleared for run ``run_id``: its prefill may start (the worker waits
        at most ``READY_WAIT_S``; the first step ends the preparing in any case)."""
        if run_id != self.run_id or not self.preparing:
            return
        self.preparing = False
        self.worker.flags.panes_cleared()

    def _on_prefill(self, run_id: int, prefill: Any) -> None:
        if run_id == self.run_id:
            self.prefill = prefill

    def _on_step(self, run_id: int, record: Any) -> None:
        if run_id != self.run_id:
            return  # a superseded run's late record
        self.steps.append(record)
        self._panes_ready(run_id)
        if not self._flush.isActive():
            self._flush.start()

    def emit_steps(self) -> None:
        """Announce the steps that arrived (and follow the newest while live)."""
        self.sig_steps_changed.emit()
        if self.follow_live and self.steps:
            self.selected = len(self.steps) - 1
            self.sig_selection_changed.emit(self.selected)

    def _on_finished(self, run_id: int, summary: Any) -> None:
        if run_id != self.run_id:
            return
        self._flush.stop()
        self.emit_steps()
        self.summary = summary
        self.dirty = True
        self._set_busy(False)
        self.sig_run_finished.emit(summary)

    def _on_result(self, kind: str, key: Any, result: Any) -> None:
        self._asked.discard(key)
        if kind == "open_session":
            self.sessions.show(result[1], result[0])
            return
        if kind == "export":
            self.sig_saved.emit(result[0], result[1])
            return

        if kind == "save_session":
            path, size, session = result
            if key[1] != self.sessions.autosave_path():
                self.session, self.session_path, self.dirty = session, path, False
            self.sig_saved.emit(path, size)
            return
        if result is None:
            return
        self._results[key] = result
        while len(self._results) > 64:
            self._results.popitem(last=False)
        self.sig_result.emit(kind, key, result)

    def _on_error(self, where: str, message: str) -> None:
        if where != "analysis":
            self._set_busy(False)
        self.sig_error.emit(message)

    def _set_busy(self, busy: bool) -> None:
        if not busy:
            self.preparing = False
        if busy != self.busy:
            self.busy = busy
            self.sig_busy_changed.emit(busy)

    def shutdown(self, timeout_ms: int = 10000) -> None:
        """Cancel any run and stop the thread (it finishes the step it is in)."""
        self.worker.flags.close()  # analyses deferred to the run's end are not wanted now
        self.request_stop()
        self._thread.quit()
        self._thread.wait(timeout_ms)
        self._collector.stop()
