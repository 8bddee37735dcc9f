"""Sessions for the window: showing a reopened run, and the save, export and open jobs handed
to the model thread. Owned by the :class:`~llm_lens.desktop.state.controller.Controller` as
``controller.sessions``; what a session holds and how many runs become one is
:mod:`llm_lens.core.sessions` (``assemble_session``), which the jobs call on the model thread.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from PySide6.QtCore import QObject, Signal

from llm_lens.core.sessions.assemble import Origin
from llm_lens.core.sessions.explained import with_explanations


class SessionController(QObject):
    """Session requests of the window. Signals are the controller's (``sig_saved``,
    ``sig_session_changed``, ``sig_error``): panes and menus subscribe there.

    ``origin`` is the reopened file whose runs were revived (continued or branched): its other
    runs stay listed in the Branches view and are saved with the window's.

    Signals (emitted from the model thread while a save runs; queued to the GUI):
    ``sig_save_estimate(path, sizes)`` the file's size per part (``estimate_size``) once the
    session is assembled, before writing; ``sig_save_progress(path, done, total)`` bytes of
    arrays written.
    """

    sig_save_progress = Signal(str, object, object)
    sig_save_estimate = Signal(str, object)

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        self.ctl = controller
        self.origin: Origin | None = None
        self._cancel = threading.Event()

    def cancel_save(self) -> None:
        """Stop the save the user asked for last (not an autosave): the previous file stays as
        it was and no partial file is left."""
        self._cancel.set()

    def _progress(self, path: str, cancel: threading.Event) -> Any:
        """The save's progress callback (called on the model thread): False cancels it. It
        holds the bound signal, not this object."""
        emit = self.sig_save_progress.emit

        def report(done: int, total: int) -> bool:
            emit(path, done, total)
            return not cancel.is_set()

        return report

    def show(self, session: Any, path: str | None = None, index: int = -1) -> None:
        """Show a run of a loaded ``Session`` in every pane, marked as recorded (``index`` -1:
        the run the file says was shown when it was saved)."""
        from llm_lens.core.records import ModelInfo
        from llm_lens.core.sessions.views import RecordedAnalysis

        ctl = self.ctl
        index = session.shown_index if index < 0 else index
        run = session.runs[index]
        ctl.request_stop()
        ctl.show_recorded(session, path, RecordedAnalysis(run), index, ModelInfo(**session.model))
        ctl.sig_run_started.emit(run.prompt)
        ctl.live.emit_steps()
        ctl.sig_run_finished.emit(ctl.summary)
        ctl.sig_session_changed.emit()

    def keep_origin(self) -> None:
        """The shown recorded run is about to be revived (continued or branched): remember
        its file, so that its other runs stay listed and are saved with the session.

        The file's runs get fresh ids once (they could clash with this window's); the shown
        file becomes that renumbered copy.
        """
        ctl = self.ctl
        if ctl.recorded is None or ctl.session is None:
            return
        run = ctl.recorded.run
        if self.origin is None or self.origin.session is not ctl.session:
            self.origin = Origin.of(ctl.session, ctl.session_path, ctl.new_run_id)
            run = self.origin.session.runs[ctl.session_index]
            ctl.replace_session(self.origin.session)
        self.origin.revived[run.run_id] = ctl.run_id

    def forget_origin(self) -> None:
        """A model was loaded: the revived file's runs belong to another model."""
        self.origin = None

    def request_save(self, path: str, with_views: bool = True, everything: bool = True) -> None:
        """Save this window's runs on the worker (the history of live runs with their branches,
        the finished comparison's columns, the shown run); ``sig_saved`` follows.

        ``with_views`` also records the lens, prompt lens, prompt maps and vocabulary
        projection (a few seconds of model time) so the file works without the model.
        ``everything`` False saves only the shown run's tree (what autosave keeps).
        """
        import dataclasses

        from llm_lens.core.sessions.assemble import assemble_session
        from llm_lens.core.sessions.format import session_from_run
        from llm_lens.core.sessions.views import recorded_run
        from llm_lens.core.sessions.write import SaveCancelled, save_session

        ctl = self.ctl
        run_id, info, worker = ctl.run_id, ctl.info, ctl.worker
        recorded = None
        if ctl.recorded is not None and ctl.session is not None:
            recorded = dataclasses.replace(ctl.session, shown=ctl.session_index)
        projection = ctl.cached_result("embedding_projection", getattr(info, "weights_id", ""))
        compared = ctl.compare.saved_comparison() if everything else None
        only = None if everything else run_id
        origin = self.origin if everything else None
        memo = {} if projection is None else {"embedding_projection": projection}

        explained = self._explanations()
        if recorded is not None and ctl.run_id in explained:  # computed on the reopened run
            runs = list(recorded.runs)
            runs[ctl.session_index] = with_explanations(runs[ctl.session_index],
                                                        explained[ctl.run_id])  # fmt: skip
            recorded = dataclasses.replace(recorded, runs=tuple(runs))

        served = getattr(info, "architecture", "") == "served"  # no views to record
        served = served or ctl.capabilities.provides is not None  # NDIF: nor of its runs

        def make(run: Any, label: str | None = None, parent: Any = None) -> Any:
            if cancel.is_set():  # Cancel pressed while the views are recorded
                raise SaveCancelled("the save was cancelled")
            if with_views and not served:
                made = recorded_run(run, label, parent, memo)
            else:
                made = session_from_run(run, info, label, parent)
            return with_explanations(made, explained.get(made.run_id, {}))

        def job(bench: Any) -> Any:  # on the model thread: core objects only
            from llm_lens.core.engines.openai.live import served_session
            from llm_lens.core.runs.served_branches import tree_runs
            from llm_lens.core.sessions.assemble import with_runs

            session = recorded or served_session(assemble_session(
                info, bench.history, bench.store, run_id, make, compared, only, origin
            ), bench.engine)  # fmt: skip
            if not recorded:  # the served branch tree lives outside the history
                session = with_runs(session, tree_runs(bench.engine, make))
            if not recorded and getattr(bench.engine, "name", "") == "ndif":  # no key in it
                session = dataclasses.replace(session, engine=bench.engine.identity.as_dict())
            # without the recorded lens (autosave), keep the residual vectors to recompute it
            size = save_session(path, session, progress, not with_views,
                                lambda sizes: estimate(path, sizes))  # fmt: skip
            return path, size, session

        cancel, estimate = threading.Event(), self.sig_save_estimate.emit  # values, not self
        if with_views:  # a save the user asked for (autosave has no views and no Cancel)
            self._cancel = cancel
        progress = self._progress(path, cancel)

        worker.submit("save_session", ("save_session", path), job)
        ctl.request_serve()

    def _explanations(self) -> dict[int, dict[tuple[int, Any], Any]]:
        """ "Why this token?" results computed in this window, by run id and (step, vs)."""
        out: dict[int, dict[tuple[int, Any], Any]] = {}
        for key, result in self.ctl.analyses.results("explain"):
            if result is not None and isinstance(key[1], int):
                args = dict(key[2:])
                out.setdefault(key[1], {})[(int(args["step"]), args.get("vs"))] = result
        return out

    def request_export(self, kind: str, path: str) -> None:
        """Write the shown run as a JSON trace (``trace``) or HTML report (``report``)."""
        import dataclasses

        ctl = self.ctl
        if not ctl.steps:
            ctl.sig_error.emit("nothing to export yet: run a prompt first")
            return
        steps, prompt, info, recorded = list(ctl.steps), ctl.prompt, ctl.info, ctl.recorded
        params = dict(recorded.run.params) if recorded else dataclasses.asdict(ctl.run_params)
        finish = ctl.summary.finish_reason if ctl.summary else None
        worker, run_id = ctl.worker, ctl.run_id
        saved = getattr(ctl.session, "engine", None) if recorded else None
        stop = (ctl.summary.extra.get("stop_error") if ctl.summary else None) or None

        def job(bench: Any) -> Any:
            from llm_lens.core.exports import trace
            from llm_lens.core.exports.report import html_report, write_report
            from llm_lens.core.layers import logit_lens
            from llm_lens.core.records import RunSummary

            if kind == "report":
                summary = RunSummary.of(0, prompt, steps, finish)
                write_report(path, html_report(info.as_dict(), prompt, steps, summary))
            elif getattr(info, "architecture", "") == "served":  # no lens; the engine record
                run = None if saved else bench.store.runs.get(run_id)
                fields = (trace.saved_engine_fields(saved, steps, stop) if saved
                          else trace.engine_fields(bench.engine, run))  # fmt: skip
                named = run.steps if run is not None else steps  # ids asked after the stream
                data = trace.served_trace(info.as_dict(), prompt, params, named, finish, fields)
                trace.write_json(data, path)
            else:
                lenses = [
                    recorded.get("lens", {"step": s.index, "k": 1}) if recorded
                    else logit_lens(bench.engine, s, 1) for s in steps
                ]  # fmt: skip
                data = trace.trace_dict(info.as_dict(), prompt, params, steps, lenses, finish)
                trace.write_json(data, path)
            return path, os.path.getsize(path), None

        worker.submit("export", ("export", path), job)
        ctl.request_serve()

    def answered(self, kind: str, key: Any, result: Any) -> bool:
        """Take the model thread's answer to a session job (False: not one of these): a file
        read is shown, a file written marks the run saved (not an autosave), and both a write
        and an export announce ``sig_saved``."""
        ctl = self.ctl
        if kind == "open_session":
            self.show(result[1], result[0])
        elif kind == "export":
            ctl.sig_saved.emit(result[0], result[1])
        elif kind == "save_session":
            path, size, session = result
            if key[1] != self.autosave_path():
                ctl.mark_saved(session, path)
            ctl.sig_saved.emit(path, size)
        else:
            return False
        return True

    @staticmethod
    def autosave_path() -> str:
        from llm_lens.core.loading import cache_root

        return str(cache_root() / "autosave.llmlens")

    def request_autosave(self) -> None:
        """Save the shown live run and its branches to the cache folder (offered back after a
        crash). Not the whole history: this runs after every run, and must stay quick."""
        if self.ctl.dirty and self.ctl.recorded is None:
            path = self.autosave_path()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.request_save(path, with_views=False, everything=False)

    def request_open(self, path: str) -> None:
        """Read a session file on the worker; it is shown when read (errors: ``sig_error``)."""
        from llm_lens.core.sessions.read import load_session

        self.ctl.worker.submit(
            "open_session", ("open_session", path), lambda _bench: (path, load_session(path))
        )
        self.ctl.request_serve()
