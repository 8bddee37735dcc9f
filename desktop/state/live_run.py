"""The live run's events from the model thread: its start, prefill, steps, end and NaN/Inf.

Owned by the :class:`~llm_lens.desktop.state.controller.Controller` as ``controller.live``. It
turns the worker's records of the run shown into what is shown (through the controller's
public ``update_shown``: the controller and this part are the only writers of ``Shown``), drops
those of a superseded run, coalesces steps to about 30 announcements a second, lets the prefill
start once the panes have cleared, and keeps where the model first computed NaN or Inf. What it
announces leaves as the controller's signals.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QTimer


class LiveRun(QObject):
    """The run streaming from the worker: ``preparing`` (the panes clear while its prefill
    waits), ``non_finite`` (the last run's ``NonFinite``, or None) and ``next_changes`` (the
    interventions of the run about to start, shown once it starts)."""

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)  # on the GUI thread: the worker's signals queue here
        from llm_lens.desktop.state.scheduler import REPAINT_MS

        self.ctl = controller
        self.preparing = False
        self.non_finite: Any = None  # NonFinite of the last run, when the model computed NaN
        self.next_changes: tuple[Any, ...] = ()  # the starting run's, shown once it starts
        self._flush = QTimer(controller, singleShot=True, interval=REPAINT_MS)
        self._flush.timeout.connect(self.emit_steps)
        w = controller.worker
        w.sig_run_started.connect(self._on_run_started)
        w.sig_prefill.connect(self._on_prefill)
        w.sig_step.connect(self._on_step)
        w.sig_run_finished.connect(self._on_finished)
        w.sig_stream_item.connect(self._on_item)

    def request(
        self, text: str, chat: bool, params: Any, max_new_tokens: int, parse_special: bool
    ) -> None:
        """Start a run (``Controller.request_run``): a running one is cancelled first, and the
        What-if list's active changes go with it."""
        from llm_lens.core.errors import LensError
        from llm_lens.core.loop.engine import RunConfig
        from llm_lens.core.runs.workbench import RunRequest

        ctl = self.ctl
        if ctl.model_info is None:
            ctl.sig_error.emit("no model is loaded yet")
            return
        try:
            config = RunConfig(max_new_tokens=max_new_tokens)
        except LensError as exc:
            ctl.sig_error.emit(str(exc))
            return
        ctl.request_stop()
        changes = self.next_changes = ctl.whatif.active()
        ctl.update_shown(run_id=ctl.new_run_id(), run_params=params, follow_live=True)
        ctl.set_busy(True)
        heads = ctl.capabilities.heads()  # NDIF: the opened heads' attention rows
        request = RunRequest(ctl.run_id, text, chat, params, config, parse_special, changes, heads)
        ctl.link.run(request)

    def adopt(self, run_id: int, params: Any) -> None:
        """Make ``run_id`` the shown live run before a job streams it (a branch)."""
        ctl = self.ctl
        ctl.request_stop()
        self.next_changes = ctl.interventions  # a branch keeps its run's interventions
        ctl.update_shown(run_id=run_id, run_params=params, follow_live=True)
        ctl.set_busy(True)

    def show_finished(
        self, run_id: int, prompt: Any, prefill: Any, steps: Any, summary: Any, params: Any,
        interventions: tuple[Any, ...],
    ) -> None:  # fmt: skip
        """Show a finished run made on the worker (``Controller.show_run``) as if it had just
        run live; analyses read the workbench's ``store.runs[run_id]``. ``interventions``: what
        the run was made under (the panes mark it)."""
        ctl = self.ctl
        if ctl.busy:  # the live run's late records and end are dropped from now on
            ctl.request_stop()
            ctl.set_busy(False)
        ctl.update_shown(run_id=run_id)
        ctl.show_loaded_model()
        ctl.update_shown(
            clear=True, recorded=None, session=None, session_path=None, prompt=prompt,
            prefill=prefill, steps=tuple(steps), summary=summary, follow_live=True, dirty=True,
            run_params=params if params is not None else ctl.run_params,
            interventions=tuple(interventions),
        )  # fmt: skip
        ctl.sig_run_started.emit(prompt)
        ctl.sig_session_changed.emit()
        self.emit_steps()
        ctl.sig_run_finished.emit(summary)

    def _on_run_started(self, run_id: int, prompt: Any) -> None:
        ctl = self.ctl
        if run_id != ctl.run_id:
            return
        ctl.show_loaded_model()
        ctl.update_shown(
            clear=True,
            recorded=None,
            session=None,
            session_path=None,
            interventions=self.next_changes,
        )
        ctl.analyses.keep_model_wide()
        ctl.update_shown(prompt=prompt)
        self.preparing = True  # the panes clear now, at their normal rate; then the prefill
        self.non_finite = None
        ctl.sig_non_finite.emit(None)
        ctl.sig_run_started.emit(prompt)
        ctl.sig_session_changed.emit()
        from llm_lens.desktop.state.scheduler import scheduler

        scheduler().when_idle(lambda: self._panes_ready(run_id))

    def _panes_ready(self, run_id: int) -> None:
        """The panes have cleared for run ``run_id``: its prefill may start (the worker waits
        at most ``READY_WAIT_S``; the first step ends the preparing in any case)."""
        if run_id != self.ctl.run_id or not self.preparing:
            return
        self.preparing = False
        self.ctl.worker.flags.panes_cleared()

    def _on_prefill(self, run_id: int, prefill: Any) -> None:
        if run_id == self.ctl.run_id:
            self.ctl.update_shown(prefill=prefill)

    def _on_step(self, run_id: int, record: Any) -> None:
        ctl = self.ctl
        if run_id != ctl.run_id:
            return  # a superseded run's late record
        ctl.update_shown(steps=ctl.steps + (record,))
        self._panes_ready(run_id)
        if not self._flush.isActive():
            self._flush.start()

    def _on_item(self, run_id: int, tag: str, payload: Any) -> None:
        """A served run's steps as it ended (``served_live``'s ``STEPS_NAMED``, just before
        its end): new records carrying the ids its server's tokenize endpoint gave after the
        stream, shown in place of the streamed ones (which carried id -1)."""
        from llm_lens.core.engines.openai.live import STEPS_NAMED

        ctl = self.ctl
        if tag != STEPS_NAMED or run_id != ctl.run_id or len(payload) != len(ctl.steps):
            return  # another job's item, a superseded run's, or steps not all shown yet
        ctl.update_shown(steps=tuple(payload))
        if not self._flush.isActive():
            self._flush.start()  # the end, queued behind, announces it at once

    def emit_steps(self) -> None:
        """Announce the steps that arrived (and follow the newest while live)."""
        ctl = self.ctl
        ctl.sig_steps_changed.emit()
        if ctl.follow_live and ctl.steps:
            ctl.update_shown(selected=len(ctl.steps) - 1)
            ctl.sig_selection_changed.emit(ctl.selected)

    def _on_finished(self, run_id: int, summary: Any) -> None:
        ctl = self.ctl
        if run_id != ctl.run_id:
            return
        self._flush.stop()
        self.emit_steps()
        ctl.update_shown(summary=summary, dirty=True)
        ctl.set_busy(False)
        stopped = getattr(summary, "extra", {}).get("stop_error")
        if stopped:  # a server failed mid-run: one line; the tokens received stay shown
            ctl.sig_error.emit(f"{stopped} ({len(ctl.steps)} tokens received)")
        ctl.sig_run_finished.emit(summary)

    def place_non_finite(self, where: str, message: str) -> None:
        """A run that stopped where the model computed NaN or Inf: keep and announce where
        (``sig_non_finite``); any other error changes nothing here."""
        from llm_lens.core.loop.nonfinite import from_message

        placed = from_message(message) if where == "run" else None
        if placed is not None:
            self.non_finite = placed
            self.ctl.sig_non_finite.emit(placed)
