"""The session half of the controller: showing a reopened run, and the save, export and open
jobs it hands to the worker. A mixin of :class:`desktop.controller.Controller`, split off to keep
each file readable; it uses the controller's state and signals.
"""

from __future__ import annotations

import os
from typing import Any


class SessionRequests:
    """Session requests of the controller (``self`` is the ``Controller``)."""

    def show_session(self, session: Any, path: str | None = None, index: int = -1) -> None:
        """Show a run of a loaded ``Session`` in every pane, marked as recorded (``index`` -1:
        the run the file says was shown when it was saved)."""
        from llm_lens.core.records import ModelInfo, RunSummary
        from llm_lens.core.sessions.views import RecordedAnalysis

        index = session.shown_index if index < 0 else index
        run = session.runs[index]
        self.session_index = index
        self.request_stop()
        self.run_id = next(self._ids)  # late records of a live run are dropped from now on
        info = ModelInfo(**session.model)
        if self.info is None or info != self.info:
            self.info = info
            self.sig_model_loaded.emit(info)
        self._reset()
        self.session, self.session_path, self.dirty = session, path, False
        self.recorded = RecordedAnalysis(run)
        self.prompt, self.prefill, self.steps = run.prompt, run.prefill, list(run.steps)
        self.summary = RunSummary.of(self.run_id, run.prompt, run.steps, run.finish_reason)
        self.follow_live = True
        self.sig_run_started.emit(run.prompt)
        self._emit_steps()
        self.sig_run_finished.emit(self.summary)
        self.sig_session_changed.emit()

    def request_save_session(
        self, path: str, with_views: bool = True, everything: bool = True
    ) -> None:
        """Save this window's runs on the worker (the history of live runs with their branches,
        the finished comparison's columns, the shown run); ``sig_saved`` follows.

        ``with_views`` also records the lens, prompt lens, prompt maps and vocabulary
        projection (a few seconds of model time) so the file works without the model.
        ``everything`` False saves only the shown run's tree (what autosave keeps).
        """
        import dataclasses

        from llm_lens.core.sessions.write import save_session

        run_id, info, book = self.run_id, self.info, self.compare.book
        recorded = None
        if self.recorded is not None and self.session is not None:
            recorded = dataclasses.replace(self.session, shown=self.session_index)
        projection = self._results.get(("embedding_projection", getattr(info, "weights_id", "")))
        compared = self.compare.saved_comparison() if everything else None
        only = None if everything else run_id
        origin = self._origin_runs() if everything else ((), ())

        def job() -> Any:
            session = recorded
            if session is None:
                memo = {} if projection is None else {"embedding_projection": projection}
                session = self._live_session(
                    run_id, info, book, compared, with_views, memo, only, origin
                )
            return path, save_session(path, session), session

        self.worker.submit("save_session", ("save_session", path), job)
        self._serve_requested.emit()

    def _live_session(
        self,
        run_id: int,
        info: Any,
        book: Any,
        compared: Any,
        with_views: bool,
        memo: Any,
        only: int | None = None,
        origin: Any = ((), ()),
    ) -> Any:
        """(On the worker.) The session of this window's runs: the history (every live run
        with its branches), the finished comparison, and the shown run."""
        from llm_lens.core.sessions.format import Session, SessionComparison, session_from_run
        from llm_lens.core.sessions.views import recorded_run

        def make(run: Any, label: str | None = None, parent: Any = None) -> Any:
            if with_views:
                return recorded_run(run, label, parent, memo)
            return session_from_run(run, info, label, parent)

        runs, order = book.saved_runs(make, only)  # the history: every run and its branches
        kept, kept_comparisons = origin  # a reopened file's runs that were not revived
        runs, order = [*kept, *runs], [r.run_id for r in kept] + order
        comparisons = list(kept_comparisons)
        if compared is not None:
            ids, shared_ms = compared
            columns = [self.worker.kept_runs.get(i) for i in ids]
            if all(c is not None for c in columns):
                at = []
                for k, (i, column) in enumerate(zip(ids, columns, strict=True)):
                    if i not in order:  # a column branched from is in the history already
                        runs.append(make(column, f"compare column {k + 1}"))
                        order.append(i)
                    at.append(order.index(i))
                comparisons.append(SessionComparison(tuple(at), shared_ms))
        if run_id not in order:
            run = self.worker.runs.get(run_id)
            if run is not None:
                runs.append(make(run))
                order.append(run_id)
            elif not comparisons:
                raise ValueError("there is no run to save")
        shown = order.index(run_id) if run_id in order else comparisons[0].runs[0]
        return Session(info.as_dict(), tuple(runs), shown=shown, comparisons=tuple(comparisons))

    def request_export(self, kind: str, path: str) -> None:
        """Write the shown run as a JSON trace (``trace``) or HTML report (``report``)."""
        import dataclasses

        if not self.steps:
            self.sig_error.emit("nothing to export yet: run a prompt first")
            return
        steps, prompt, info, recorded = list(self.steps), self.prompt, self.info, self.recorded
        params = dict(recorded.run.params) if recorded else dataclasses.asdict(self.run_params)
        finish = self.summary.finish_reason if self.summary else None

        def job() -> Any:
            from llm_lens.core.exports import trace
            from llm_lens.core.exports.report import html_report, write_report
            from llm_lens.core.layers import logit_lens
            from llm_lens.core.records import RunSummary

            if kind == "report":
                summary = RunSummary.of(0, prompt, steps, finish)
                write_report(path, html_report(info.as_dict(), prompt, steps, summary))
            else:
                lenses = [
                    recorded.get("lens", {"step": s.index, "k": 1}) if recorded
                    else logit_lens(self.worker.engine, s, 1) for s in steps
                ]  # fmt: skip
                data = trace.trace_dict(info.as_dict(), prompt, params, steps, lenses, finish)
                trace.write_json(data, path)
            return path, os.path.getsize(path), None

        self.worker.submit("export", ("export", path), job)
        self._serve_requested.emit()

    def _origin_runs(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """(Runs, comparisons) of the reopened file whose runs were revived, but not the revived
        ones (the live roots made of them are saved instead; their children follow them)."""
        import dataclasses

        from llm_lens.core.sessions.format import SessionComparison

        origin, revived = self.origin, self.origin_revived
        if origin is None:
            return (), ()
        kept = [r for r in origin.runs if r.run_id not in revived]
        runs = tuple(
            dataclasses.replace(r, parent=(revived[r.parent[0]], r.parent[1]))
            if r.parent is not None and r.parent[0] in revived
            else r
            for r in kept
        )
        where = {r.run_id: i for i, r in enumerate(kept)}
        index = [where.get(r.run_id) for r in origin.runs]
        comparisons = tuple(
            SessionComparison(tuple(index[i] for i in c.runs), c.shared_prefill_ms)
            for c in origin.comparisons
            if all(index[i] is not None for i in c.runs)
        )
        return runs, comparisons

    @staticmethod
    def _autosave_path() -> str:
        from llm_lens.core.loading import cache_root

        return str(cache_root() / "autosave.llmlens")

    def request_autosave(self) -> None:
        """Save the shown live run and its branches to the cache folder (offered back after a
        crash). Not the whole history: this runs after every run, and must stay quick."""
        if self.dirty and self.recorded is None:
            path = self._autosave_path()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.request_save_session(path, with_views=False, everything=False)

    def request_open_session(self, path: str) -> None:
        """Read a session file on the worker; it is shown when read (errors: ``sig_error``)."""
        from llm_lens.core.sessions.read import load_session

        self.worker.submit(
            "open_session", ("open_session", path), lambda: (path, load_session(path))
        )
        self._serve_requested.emit()
