"""Comparisons, beam search and branching for the views, run on the worker as streaming jobs.

Owned by the :class:`~desktop.state.controller.Controller` as ``controller.compare``. The jobs
(:mod:`llm_lens.core.runs.jobs`) run on the model thread through ``Worker.stream``; their items come
back here and leave as this object's signals. A branch streams into the panes like a live run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QObject, Signal

from llm_lens.core.runs.jobs import (
    CompareStart,
    ShownRun,
    beam_job,
    compare_job,
    grow_job,
    register_job,
)
from llm_lens.desktop.state import compare_served
from llm_lens.desktop.state.compare_checks import (
    continue_problem,
    grow_problem,
    job_problem,
    samples_problem,
)
from llm_lens.desktop.state.compare_replay import replayed_comparison
from llm_lens.desktop.state.compare_served import served

GROWING = ("branch", "continue")  # jobs that stream into the panes as the shown run


class CompareController(QObject):
    """State of the comparison, beam and branch views, and their requests.

    Signals:
        sig_compare_started(object): ``CompareStart`` (prompt, settings, run ids, prefill ms).
        sig_compare_step(int, object): a column index and its new ``StepRecord``.
        sig_compare_finished(object): ``CompareOutcome`` of the comparison.
        sig_beam_started(object): ``PromptTokens`` of the beam search.
        sig_beam_step(object): ``BeamFrame`` (a ``BeamStep`` and the live beams' texts).
        sig_beam_finished(object): ``BeamResult``.
        sig_tree_changed(object): tuple of ``BranchNode`` of the branch tree.
        sig_prefix_reused(int, float): prompt tokens the last run reused, TTFT saved (ms).
        sig_revived(float, float, bool): a run opened from a session was made live again on the
            loaded model: the largest logit difference to the recording, the logits' scale,
            and whether that is within float rounding.
        sig_error(str, str): what it concerns ("compare", "beam", "branch", "continue") and a
            message.
    """

    sig_compare_started = Signal(object)
    sig_compare_step = Signal(int, object)
    sig_compare_finished = Signal(object)
    sig_beam_started = Signal(object)
    sig_beam_step = Signal(object)
    sig_beam_finished = Signal(object)
    sig_tree_changed = Signal(object)
    sig_prefix_reused = Signal(int, float)
    sig_revived = Signal(float, float, bool)
    sig_error = Signal(str, str)

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        self.ctl = controller
        self.start: CompareStart | None = None
        self.columns: list[list[Any]] = []  # each column's step records
        self.outcome: Any = None
        self.beam_frames: list[Any] = []
        self.beam_result: Any = None
        self.nodes: tuple[Any, ...] = ()
        self.shown: dict[int, ShownRun] = {}  # branch-tree runs by run id
        self.running: dict[str, int] = {}  # view → job id of its running job
        self._kinds: dict[int, str] = {}
        self._owner = -1  # controller.run_id when a job set busy
        worker = controller.worker
        worker.sig_stream_item.connect(self._on_item)
        worker.sig_prefix_reused.connect(self._on_prefix_reused)
        worker.sig_loaded.connect(self._on_model_loaded)
        worker.sig_history.connect(self._on_history)
        controller.sig_session_changed.connect(self._on_session_changed)
        self._session: Any = None  # the session whose runs the tree shows
        self._session_path: str | None = None
        self._session_runs: dict[int, int] = {}  # its run ids → index in session.runs
        self._session_columns: list[int] = []  # a reopened comparison's runs (session indices)

    # ----------------------------------------------------------------- requests
    def request_compare(
        self, text: str, chat: bool, configs: list[Any], max_new: int,
        interventions: Sequence[Sequence[Any]] = (),
    ) -> None:  # fmt: skip
        """2–4 sampling configurations side by side from one shared prefill; ``interventions``
        holds each column's What-if changes (empty: every column clean)."""
        from llm_lens.core.errors import SamplingError
        from llm_lens.core.sampling import check_configs

        try:
            check_configs(len(configs))
        except SamplingError as exc:
            self.sig_error.emit("compare", str(exc))
            return
        self._compare(text, chat, configs, max_new, interventions=interventions)

    def request_samples(
        self, text: str, chat: bool, params: Any, k: int, seed: int, max_new: int,
        interventions: Sequence[Any] = (),
    ) -> None:  # fmt: skip
        """K samples of one configuration with seeds seed … seed + K − 1 (each under
        ``interventions``)."""
        problem = samples_problem(k, seed)
        if problem:
            self.sig_error.emit("compare", problem)
            return
        configs = [params.with_(seed=seed + i) for i in range(k)]
        self._compare(text, chat, configs, max_new, True, [tuple(interventions)] * k)

    def _compare(
        self, text: str, chat: bool, configs: list[Any], max_new: int, samples: bool = False,
        interventions: Sequence[Sequence[Any]] = (),
    ) -> None:  # fmt: skip
        ids = [self.ctl.new_run_id() for _ in configs]
        old = [i for i in (self.start.run_ids if self.start else ()) if i != self.ctl.run_id]

        def drop(bench: Any) -> None:  # on the model thread
            bench.store.forget([i for i in old if not bench.history.holds(i)])

        changes = [tuple(c) for c in interventions]
        args = (text, chat, configs, max_new, ids, drop, samples, changes)
        if served(self.ctl):  # one request a column, in flight together
            self._run("compare", *compare_served.compare_job(self.ctl, *args))
            return
        self._run("compare", compare_job(*args))

    def request_beam(self, text: str, chat: bool, beams: int, max_new: int) -> None:
        self._run("beam", beam_job(text, chat, beams, max_new))

    def request_branch(
        self, step: int, token_id: int, max_new: int, token_text: str | None = None
    ) -> None:
        """Continue the shown run as if step ``step`` had chosen ``token_id`` (on a server,
        which may name tokens by text only: ``token_text``); it streams into the panes like a
        live run and joins the branch tree."""
        problem = grow_problem(self.ctl, step)
        if problem:
            self.sig_error.emit("branch", problem)
            return
        self._grow("branch", step, token_id, max_new, token_text)

    def request_continue(self, max_new: int) -> None:
        """Let the shown run go on for ``max_new`` more tokens with its own sampler settings (a
        run opened from a session is first revived on the loaded model)."""
        problem = continue_problem(self.ctl)
        if problem:
            self.sig_error.emit("continue", problem)
            return
        self._grow("continue", None, None, max_new)

    def _grow(self, kind: str, step: int | None, token_id: int | None, max_new: int,
              text: str | None = None) -> None:  # fmt: skip
        """Stream the branch (``step`` None: the continuation) into the panes; on a server, a
        new request on the text so far (``compare_served.branch_job``)."""
        ctl = self.ctl
        shown, new_id, recorded = ctl.run_id, ctl.new_run_id(), ctl.recorded_run()
        if served(ctl):
            job, problem = compare_served.branch_job(ctl, step, token_id, text, max_new, new_id)
            if problem:
                self.sig_error.emit(kind, problem)
                return
        else:
            job = grow_job(shown, step, token_id, max_new, new_id, recorded)
        ctl.sessions.keep_origin()
        ctl.live.adopt(new_id, ctl.run_params)
        self._kinds[new_id], self.running[kind] = kind, new_id
        ctl.request_stream(new_id, job)

    def _run(self, kind: str, job: Any, problem: str = "") -> None:
        problem = problem or job_problem(self.ctl, kind)
        if problem:
            self.sig_error.emit(kind, problem)
            return
        self.ctl.request_stop()  # a running generation ends first; the job queues behind it
        job_id = self.ctl.new_run_id()
        self._kinds[job_id], self.running[kind] = kind, job_id
        self.ctl.request_stream(job_id, job)

    def request_stop(self) -> None:
        self.ctl.request_stop()

    def set_reuse_prefix(self, on: bool) -> None:
        """Let the next runs read only the part of the prompt the last run's cache lacks."""
        self.ctl.worker.flags.set_reuse_prefix(on)

    def alternatives(self, k: int) -> list[Any]:
        """The selected step's top-k tokens with raw and after-sampling probabilities."""
        from llm_lens.core.runs.branching import alternatives

        step = self.ctl.current_step()
        if step is None:
            return []
        if served(self.ctl):  # the alternatives the server returned
            return compare_served.alternatives(self.ctl, k)
        params = None if self.ctl.recorded is not None else self.ctl.run_params
        return alternatives(step, k, params)

    # ----------------------------------------------------------------- showing
    def show_column(self, column: int, step: int = -1) -> None:
        """Show a comparison column in every pane (at ``step``, or its last step)."""
        if self.start is None or not 0 <= column < len(self.columns) or self.outcome is None:
            return
        if self._session_columns:  # a comparison reopened from a session
            self._show_session_run(self._session_columns[column], step)
            return
        from llm_lens.core.records import RunSummary

        run_id, steps = self.start.run_ids[column], tuple(self.columns[column])
        finish = self.outcome.finish_reasons[column]
        summary = RunSummary.of(run_id, self.start.prompt, steps, finish)
        prefill = self.outcome.prefills[column]
        params = self.start.params[column]
        changes = self.start.interventions[column] if self.start.interventions else ()
        if changes:
            summary.extra["interventions"] = [i.to_dict() for i in changes]
        shown = ShownRun(run_id, self.start.prompt, prefill, steps, summary, params, changes)
        self._show(shown, step)

    def show_node(self, run_id: int, step: int = -1) -> None:
        """Show a run of the branch tree (its whole path from the root) in every pane."""
        if run_id in self._session_runs:
            self._show_session_run(self._session_runs[run_id], step)
            return
        if run_id in self.shown:
            self._show(self.shown[run_id], step)

    def _show(self, shown: ShownRun, step: int) -> None:
        ctl = self.ctl
        if shown.run_id == ctl.run_id and ctl.recorded is None:  # shown already
            if step >= 0:
                ctl.request_select(step)
            return
        ctl.worker.submit("register_run", ("register_run", shown.run_id),
                          register_job(shown.run_id))  # fmt: skip
        ctl.request_serve()
        ctl.show_run(
            shown.run_id, shown.prompt, shown.prefill, shown.steps, shown.summary, shown.params,
            shown.interventions,
        )  # fmt: skip
        if step >= 0:
            ctl.request_select(step)

    # ----------------------------------------------------------------- worker items
    def _on_item(self, job_id: int, tag: str, payload: Any) -> None:
        kind = self._kinds.get(job_id)
        if kind is None or self.running.get(kind) != job_id:
            return  # a superseded job
        if tag == "error":
            self._end(kind, job_id)
            self.sig_error.emit(kind, payload)
            return
        handler = getattr(self, f"_on_{tag}", None)
        if handler is not None:
            handler(payload)
        if tag.endswith("_started") and kind not in GROWING:
            self._owner = self.ctl.run_id
            self.ctl.set_busy(True)
        if tag.endswith("_done"):
            self._end(kind, job_id)

    def _end(self, kind: str, job_id: int) -> None:
        self.running.pop(kind, None)
        self._kinds.pop(job_id, None)
        owner = job_id if kind in GROWING else self._owner
        if self.ctl.run_id == owner:
            self.ctl.set_busy(False)

    def _on_compare_started(self, start: CompareStart) -> None:
        self.start, self.columns, self.outcome = start, [[] for _ in start.run_ids], None
        self._session_columns = []
        self.sig_compare_started.emit(start)

    def _on_compare_step(self, item: tuple[int, Any]) -> None:
        column, record = item
        self.columns[column].append(record)
        self.sig_compare_step.emit(column, record)

    def _on_compare_done(self, outcome: Any) -> None:
        self.outcome = outcome
        self.sig_compare_finished.emit(outcome)

    def _on_beam_started(self, prompt: Any) -> None:
        self.beam_frames, self.beam_result = [], None
        self.sig_beam_started.emit(prompt)

    def _on_beam_step(self, frame: Any) -> None:
        self.beam_frames.append(frame)
        self.sig_beam_step.emit(frame)

    def _on_beam_done(self, result: Any) -> None:
        self.beam_result = result
        self.sig_beam_finished.emit(result)

    def _show_session_run(self, index: int, step: int) -> None:
        ctl = self.ctl
        if ctl.recorded is None or ctl.session is not self._session or ctl.session_index != index:
            ctl.sessions.show(self._session, self._session_path, index)
        if step >= 0:
            ctl.request_select(step)

    def saved_comparison(self) -> tuple[tuple[int, ...], float] | None:
        """(run ids, shared prefill ms) of the finished live comparison, to save with a session."""
        if self.start is None or self.outcome is None or self._session_columns:
            return None
        return self.start.run_ids, self.start.shared_prefill_ms

    def is_recorded(self, run_id: int) -> bool:
        """Whether a tree node is a run of a reopened file (not live on the model thread)."""
        return run_id in self._session_runs

    def current_node(self) -> int:
        """The tree node of the run shown: a session run's saved id, or the live run id."""
        ctl = self.ctl
        if ctl.recorded is not None and ctl.session is self._session and self._session_runs:
            return int(ctl.session.runs[ctl.session_index].run_id)
        return int(ctl.run_id)

    def _on_session_changed(self) -> None:
        """A reopened session's runs become the tree (its branches, when it has any)."""
        ctl = self.ctl
        if ctl.recorded is None or ctl.session is None:
            return
        if ctl.session is not self._session:
            from llm_lens.core.runs.branching import session_nodes

            session = ctl.session
            self._session, self._session_path = session, ctl.session_path
            self._session_runs = {r.run_id: i for i, r in enumerate(session.runs)}
            self.nodes, self.shown = tuple(session_nodes(session.runs)), {}
            if session.comparisons:
                self._replay_comparison(session, session.comparisons[-1])
        self.sig_tree_changed.emit(self.nodes)

    def _replay_comparison(self, session: Any, saved: Any) -> None:
        """Show a session's comparison in the compare view (``replayed_comparison``)."""
        start, runs, outcome = replayed_comparison(session, saved)
        self._on_compare_started(start)
        for column, run in enumerate(runs):
            for record in run.steps:
                self._on_compare_step((column, record))
        self._on_compare_done(outcome)
        self._session_columns = list(saved.runs)

    def _on_branch_done(self, item: tuple[ShownRun, tuple[Any, ...]]) -> None:
        shown, nodes = item
        self.shown[shown.run_id] = shown
        self._set_nodes(nodes)

    def _on_history(self, item: tuple[ShownRun, tuple[Any, ...]]) -> None:
        """A finished live run (or a served run first branched) became a root of the tree."""
        shown, nodes = item
        self.shown[shown.run_id] = shown
        self._set_nodes(nodes)

    def _set_nodes(self, nodes: tuple[Any, ...]) -> None:
        """The live history replaces a reopened session's runs in the tree, but a file whose
        run was continued or branched keeps its other runs listed after it."""
        self._session, self._session_runs = None, {}
        origin = self.ctl.sessions.origin
        kept = [] if origin is None else origin.kept_runs()
        if origin is not None and kept:
            from llm_lens.core.runs.branching import session_nodes

            nodes = (*nodes, *session_nodes(kept))
            self._session, self._session_path = origin.session, origin.path
            where = {r.run_id: i for i, r in enumerate(origin.session.runs)}
            self._session_runs = {r.run_id: where[r.run_id] for r in kept}
        self.nodes = nodes
        alive = {n.run_id for n in nodes}
        gone = [v for k, v in self.shown.items() if k not in alive]
        self.shown = {k: v for k, v in self.shown.items() if k in alive}
        if gone:  # the last hold on their arrays: freed on the model thread, not this one
            self.ctl.worker.let_go(gone)
            self.ctl.request_serve()
        self.sig_tree_changed.emit(nodes)

    def _on_revived(self, item: tuple[float, float, bool]) -> None:
        self.sig_revived.emit(*item)

    def _on_prefix_reused(self, run_id: int, tokens: int, saved_ms: float) -> None:
        if run_id == self.ctl.run_id:
            self.sig_prefix_reused.emit(tokens, saved_ms)

    def _on_model_loaded(self, _info: Any) -> None:
        self.start, self.columns, self.outcome = None, [], None
        self.beam_frames, self.beam_result, self.nodes, self.shown = [], None, (), {}
        self._session, self._session_runs, self._session_columns = None, {}, []
        self.sig_tree_changed.emit(())
