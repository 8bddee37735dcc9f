"""The GUI-side hub: owns the worker thread, holds the records, coalesces updates for panes.

Panes subscribe to the controller, never to the worker, and write back only through its
``request_*`` methods.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QObject, Signal

from llm_lens.desktop.state.analyses import AnalysisRequests
from llm_lens.desktop.state.capabilities import Capabilities
from llm_lens.desktop.state.live_run import LiveRun
from llm_lens.desktop.state.shown import Shown, shown_property
from llm_lens.desktop.state.worker_link import WorkerLink


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
        sig_non_finite(object): where the model first computed NaN or Inf in the run (a
            :class:`~llm_lens.core.loop.nonfinite.NonFinite`), or None when a run starts.
        sig_busy_changed(bool): a load or a run started (True) or ended (False).
        sig_session_changed(): a session was opened, or the shown run became a live one.
        sig_saved(str, int): a session was written (path, bytes).
        sig_head_requested(int, int): show this layer and head (a click in "why this token?").
        sig_explain_requested(int): explain this step's token (a "why?" on a token).
        sig_token_selected(int): the selected token changed (its context position, or -1);
            see :mod:`desktop.state.selection`.

    It is composed of parts with one job each: ``link`` (``WorkerLink``: the model thread and
    the requests queued to its ``worker``), ``live`` (``LiveRun``: the live run's requests and
    events), ``analyses`` (``AnalysisRequests``: the panes' analyses, cached), ``capabilities``
    (what the engine fills), ``sessions`` (``SessionController``: reopened runs, save, export,
    open) and ``compare`` (``CompareController``: comparisons, beam searches, branches,
    continuations). This class holds what is shown (the run, its steps, the selected step, the
    sampler settings) and whether the model thread is busy; only it and ``live`` change them.
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
    sig_non_finite = Signal(object)
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
    interventions = shown_property("interventions")

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        from llm_lens.core.sampling import SamplingParams

        self._model_info: Any = None  # the model loaded on the worker
        self._params = SamplingParams()  # the sampler settings of the next run
        self.__shown = Shown(run_params=self._params)  # replaced by this class and live only
        self._busy = False
        self._ids = itertools.count(1)
        self.analyses = AnalysisRequests(self)
        from llm_lens.desktop.state.whatif import WhatIfList

        self.whatif = WhatIfList(self)  # the What-if list: the next run's interventions
        self.link = WorkerLink(self)
        self._thread = self.link.model_thread
        # the window's only hold on the worker besides its signals: it never sets its fields
        self.worker = self.link.worker
        self._wire()
        self.live = LiveRun(self)
        self.capabilities = Capabilities(self)
        from llm_lens.desktop.state.compare_controller import CompareController
        from llm_lens.desktop.state.gui_gc import GuiThreadCollector
        from llm_lens.desktop.state.session_controller import SessionController

        self._collector = GuiThreadCollector(self)  # never collect on the model thread

        self.sessions = SessionController(self)
        self.compare = CompareController(self)
        from llm_lens.desktop.state.sweep import SweepRunner

        self.sweep = SweepRunner(self)  # patching sweeps: their job, progress and maps
        self.link.start()

    def _wire(self) -> None:
        """The worker's signals, each to what it changes here."""
        w = self.worker
        w.sig_loading.connect(self.sig_model_loading)
        w.sig_loaded.connect(self._on_loaded)
        w.sig_result.connect(self._on_result)
        w.sig_error.connect(self._on_error)

    # ----------------------------------------------------------------- requests
    def request_load(
        self,
        spec: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        placement: Any = None,
        allow_partly_random: bool = False,
    ) -> None:
        """Load ``spec`` (None: the bundled model); ``placement`` (a core ``Placement``) spreads
        or quantizes it, ``allow_partly_random`` accepts missing weights (marked)."""
        self.set_busy(True)
        self.link.load(spec, device, dtype, placement, allow_partly_random)  # a run ends first

    def request_open_server(self, spec: Any) -> None:
        """Open a model behind an OpenAI-compatible server (a ``ServerSpec``): like a load."""
        self.set_busy(True)
        self.link.open_server(spec)

    def why_not(self, capability: str) -> str | None:
        """None when the shown run's engine fills ``capability``; else the one line a pane
        shows instead (``Provides.why_not``): what this engine lacks and how to get it."""
        return self.capabilities.why_not(capability)

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
        self.live.request(text, chat, params, max_new_tokens, parse_special)

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
        through ``sig_result(kind, key, result)``. A run reopened from a session answers from
        its recording, or from the model when it matches (``analyses``).
        """
        return self.analyses.request(kind, args)

    def waiting_text(self, what: str, computing: str) -> str:
        """What a pane says while an analysis has no answer yet (``AnalysisRequests``)."""
        return self.analyses.waiting_text(what, computing)

    def cached_result(self, kind: str, scope: Any, **args: Any) -> Any:
        """An analysis result already computed (None if not), without scheduling anything."""
        return self.analyses.cached(kind, scope, **args)

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
        changes = tuple(getattr(run, "interventions", ()))
        if changes:  # the HTML report and the window say what the recorded run changed
            summary.extra["interventions"] = [i.to_dict() for i in changes]
        self._shown = self._shown.cleared(
            session=session, session_path=path, dirty=False, recorded=recorded,
            prompt=run.prompt, prefill=run.prefill, steps=tuple(run.steps), summary=summary,
            follow_live=True, interventions=changes,
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

    def update_shown(self, clear: bool = False, **fields: Any) -> None:
        """Replace ``fields`` of what is shown (on an emptied value, ``Shown.cleared``, when
        ``clear``): the one writer API of ``Shown``, for this class and ``controller.live``."""
        shown = self._shown.cleared(**fields) if clear else replace(self._shown, **fields)
        self._shown = shown

    def _replace(self, **changes: Any) -> None:
        self.update_shown(**changes)

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
        self.link.stream(job_id, job)

    def request_serve(self) -> None:
        """Let the worker run the jobs queued with ``worker.submit``."""
        self.link.serve()

    @property
    def busy(self) -> bool:
        """A load, run or job holds the model thread (``set_busy`` and the run's events)."""
        return self._busy

    @property
    def preparing(self) -> bool:
        """A run started and the panes clear while its prefill waits (until the panes are
        ready, its first step, or its end)."""
        return self.live.preparing

    @property
    def non_finite(self) -> Any:
        """Where the last run's model first computed NaN or Inf (a ``NonFinite``), or None."""
        return self.live.non_finite

    def set_busy(self, busy: bool) -> None:
        """A job began or ended (``sig_busy_changed`` when that changes ``busy``); not busy
        also ends the preparing."""
        if not busy:
            self.live.preparing = False
        if busy != self._busy:
            self._busy = busy
            self.sig_busy_changed.emit(busy)

    def show_run(
        self, run_id: int, prompt: Any, prefill: Any, steps: Any, summary: Any, params: Any = None,
        interventions: tuple[Any, ...] = (),
    ) -> None:  # fmt: skip
        """Show a finished run made on the worker (a comparison column, a branch) in every pane
        as if it had just run live (``LiveRun.show_finished``)."""
        self.live.show_finished(run_id, prompt, prefill, steps, summary, params, interventions)

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
        self._shown = self._shown.cleared(
            info=info, recorded=None, session=None, session_path=None, interventions=()
        )
        self.analyses.forget()
        self.set_busy(False)
        self.sig_model_loaded.emit(info)

    def show_loaded_model(self) -> None:
        """The loaded model becomes the shown one (``sig_model_loaded`` if it was not): a
        recorded run of another model was shown and a run of the loaded one starts
        (``LiveRun`` calls it)."""
        if self.info != self.model_info:
            self._replace(info=self.model_info)
            self.sig_model_loaded.emit(self.model_info)

    def _on_result(self, kind: str, key: Any, result: Any) -> None:
        """A job's answer: a session file read, written or exported (``sessions``), or an
        analysis, kept and announced as ``sig_result`` (None: dropped, nothing announced)."""
        if not self.sessions.answered(kind, key, result) and self.analyses.answered(key, result):
            self.sig_result.emit(kind, key, result)

    def _on_error(self, where: str, message: str) -> None:
        if where != "analysis":
            self.set_busy(False)
        self.live.place_non_finite(where, message)  # a run stopped where NaN or Inf appeared
        self.sig_error.emit(message)

    def shutdown(self, timeout_ms: int = 10000) -> None:
        """Cancel any run and stop the thread (it finishes the step it is in)."""
        self.link.shutdown(timeout_ms)
        self._collector.stop()
