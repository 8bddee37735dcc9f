"""The GUI-side hub: owns the worker thread, holds the records, coalesces updates for panes.

Panes subscribe to the controller, never to the worker, and write back only through its
``request_*`` methods.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import replace
from functools import partial
from typing import Any

from PySide6.QtCore import QObject, QThread, QTimer, Signal

from llm_lens.core.runs.flags import WorkerFlags
from llm_lens.core.runs.workbench import RunRequest
from llm_lens.desktop.model_thread.worker import Worker
from llm_lens.desktop.state.scheduler import REPAINT_MS
from llm_lens.desktop.state.shown import Shown, shown_property


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

    # what is shown, read-only (``Shown``): only this class's methods replace it
    info = shown_property("info")
    prompt = shown_property("prompt")
    prefill = shown_property("prefill")
    steps = shown_property("steps")
    summary = shown_property("summary")
    run_params = shown_property("run_params")
    run_id = shown_property("run_id")
    recorded = shown_property("recorded")
    session = shown_property("session")
    session_path = shown_property("session_path")
    session_index = shown_property("session_index")
    dirty = shown_property("dirty")
    selected = shown_property("selected")
    token = shown_property("token")
    follow_live = shown_property("follow_live")

    _load_requested = Signal(object, str, str)
    _run_requested = Signal(object)  # a RunRequest
    _serve_requested = Signal()
    _stream_requested = Signal(int, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        from llm_lens.core.sampling import SamplingParams

        self._model_info: Any = None  # the model loaded on the worker
        self._params = SamplingParams()  # the sampler settings of the next run
        self.__shown = Shown(run_params=self._params)  # replaced by this class's methods only
        self.busy = False
        self.preparing = False  # a run started: the panes clear while its prefill waits
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
        self._replace(run_id=next(self._ids), run_params=params, follow_live=True)
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
        changed = index != self.selected
        self._replace(selected=index, follow_live=index == len(self.steps) - 1)
        if changed:
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
        from llm_lens.desktop.state.selection import resolve_token

        position, step = resolve_token(self, position, with_step)
        if step is not None:
            self.request_select(step)
        if position != self.token:
            self._replace(token=position)
            self.sig_token_selected.emit(position)

    def request_params(self, params: Any) -> None:
        self._params = params
        self.sig_params_changed.emit(params)

    @property
    def params(self) -> Any:
        """The sampler settings the next run uses (``request_params`` changes them)."""
        return self._params

    @property
    def model_info(self) -> Any:
        """The ``ModelInfo`` of the model loaded on the worker (None before a load)."""
        return self._model_info

    @property
    def shown(self) -> Shown:
        """What is shown, as one frozen value (the properties above read its fields)."""
        return self._shown

    def current_step(self) -> Any:
        return self._shown.current_step()

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

    def show_recorded(
        self, session: Any, path: str | None, recorded: Any, index: int, info: Any
    ) -> None:
        """Make run ``index`` of ``session`` (``recorded``, its ``RecordedAnalysis``, made with
        the model ``info``) the shown one under a fresh run id: late records of a live run are
        dropped from now on. Emits ``sig_model_loaded`` when ``info`` is not the model shown;
        the caller announces the run (``SessionController.show``)."""
        from llm_lens.core.records import RunSummary

        run_id = self.new_run_id()
        self._replace(session_index=index, run_id=run_id)
        if self.info is None or info != self.info:
            self._replace(info=info)
            self.sig_model_loaded.emit(info)
        run = recorded.run
        summary = RunSummary.of(run_id, run.prompt, run.steps, run.finish_reason)
        self._shown = self._shown.cleared(
            session=session, session_path=path, dirty=False, recorded=recorded,
            prompt=run.prompt, prefill=run.prefill, steps=tuple(run.steps), summary=summary,
            follow_live=True,
        )  # fmt: skip

    def replace_session(self, session: Any) -> None:
        """The shown run's file becomes ``session`` (its copy with fresh run ids, kept as the
        origin of revived runs: ``SessionController.keep_origin``)."""
        self._replace(session=session)

    def mark_saved(self, session: Any, path: str) -> None:
        """The shown runs were saved as ``session`` in ``path``: nothing left unsaved."""
        self._replace(session=session, session_path=path, dirty=False)

    def use_model(self, info: Any) -> None:
        """Take ``info`` as the loaded model and the shown run's model without a load and
        without telling the panes (a test or script that put an engine on the worker)."""
        self._model_info = info
        self._replace(info=info)

    def show_state(self, shown: Shown) -> None:
        """Show ``shown`` as it is, announcing nothing: for a test or script that draws the
        panes itself (the window's paths are the methods that announce)."""
        self._shown = shown

    @property
    def _shown(self) -> Shown:
        return self.__shown

    @_shown.setter
    def _shown(self, shown: Shown) -> None:
        """Every new value passes here: the model thread learns which run is shown, so that
        guesses computed ahead for another run are dropped at once (not at the next request)."""
        self.__shown = shown
        worker = self.__dict__.get("worker")
        if worker is not None and worker.flags.shown_run_id != shown.run_id:
            worker.flags.show(shown.run_id)

    def _replace(self, **changes: Any) -> None:
        """Replace fields of what is shown (the one place besides whole new values)."""
        self._shown = replace(self._shown, **changes)

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
        self._replace(run_id=run_id, run_params=params, follow_live=True)
        self._set_busy(True)

    def show_run(
        self, run_id: int, prompt: Any, prefill: Any, steps: Any, summary: Any, params: Any = None
    ) -> None:
        """Show a finished run made on the worker (a comparison column, a branch) in every pane
        as if it had just run live; analyses read the workbench's ``store.runs[run_id]``."""
        if self.busy:  # the live run's late records and end are dropped from now on
            self.request_stop()
            self._set_busy(False)
        self._replace(run_id=run_id)
        self._show_loaded_model()
        self._shown = self._shown.cleared(
            recorded=None, session=None, session_path=None, prompt=prompt, prefill=prefill,
            steps=tuple(steps), summary=summary, follow_live=True, dirty=True,
            run_params=params if params is not None else self.run_params,
        )  # fmt: skip
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
        self._model_info = info
        self._shown = self._shown.cleared(info=info, recorded=None, session=None, session_path=None)
        self._results.clear()
        self._asked.clear()
        self._set_busy(False)
        self.sig_model_loaded.emit(info)

    def _show_loaded_model(self) -> None:
        """The loaded model becomes the shown one (``sig_model_loaded`` if it was not): a
        recorded run of another model was shown."""
        if self.info != self.model_info:
            self._replace(info=self.model_info)
            self.sig_model_loaded.emit(self.model_info)

    def _on_run_started(self, run_id: int, prompt: Any) -> None:
        if run_id != self.run_id:
            return
        self._show_loaded_model()
        self._shown = self._shown.cleared(recorded=None, session=None, session_path=None)
        model_wide = {k: v for k, v in self._results.items() if isinstance(k[1], str)}
        self._results = OrderedDict(model_wide)
        self._asked = {k for k in self._asked if isinstance(k[1], str)}
        self._replace(prompt=prompt)
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
            self._replace(prefill=prefill)

    def _on_step(self, run_id: int, record: Any) -> None:
        if run_id != self.run_id:
            return  # a superseded run's late record
        self._shown = self._shown.with_step(record)
        self._panes_ready(run_id)
        if not self._flush.isActive():
            self._flush.start()

    def emit_steps(self) -> None:
        """Announce the steps that arrived (and follow the newest while live)."""
        self.sig_steps_changed.emit()
        if self.follow_live and self.steps:
            self._replace(selected=len(self.steps) - 1)
            self.sig_selection_changed.emit(self.selected)

    def _on_finished(self, run_id: int, summary: Any) -> None:
        if run_id != self.run_id:
            return
        self._flush.stop()
        self.emit_steps()
        self._replace(summary=summary, dirty=True)
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
                self.mark_saved(session, path)
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
