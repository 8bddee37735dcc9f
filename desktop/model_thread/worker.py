"""The model's thread: a QObject living on one long-lived QThread that runs core's jobs and relays
their items as signals.

The model, its runs and the live run are core's :class:`~llm_lens.core.runs.workbench.Workbench`;
which queued analysis runs when (the budget between a run's steps, the work ahead) is core's
:class:`~llm_lens.core.runs.budget.AnalysisQueue`. This adapter adds what needs Qt: the slots
the GUI's queued signals reach, the signals that carry records back, and the timers that give
the freed heap back (:mod:`llm_lens.desktop.model_thread.trim`). The GUI tells it what cannot
wait behind the queue (cancel, closing, "something is wanted") through the
:class:`~llm_lens.core.runs.flags.WorkerFlags` it was made with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from llm_lens.core.errors import LensError
from llm_lens.core.runs.budget import AnalysisJob, AnalysisQueue, decode_ms
from llm_lens.core.runs.flags import WorkerFlags
from llm_lens.core.runs.workbench import RunRequest, Workbench
from llm_lens.desktop.model_thread.trim import AfterDelays, HeapTrim, has_event_loop

RELEASE_AFTER_MS = 200.0  # analyses that took this long may have freed much: release_memory
TRIM_DELAY_MS = 1500  # after a run, the freed heap goes back once the window has drawn its end
TRIM_AFTER_ANSWER_MS = 200  # ... and after long analyses once the window has drawn the answer
TRIM_IDLE_MS = 2000  # ... and after work ahead once nothing was asked for this long
AHEAD_DELAY_MS = 250  # guesses start this long after the last answer left: the window has drawn
# it, and a person stepping by holding a key down (a request every ~30-100 ms) is not guessed for
FILE_JOBS = ("save_session", "open_session", "export", "let_go")  # not analyses: run on a server
RUN_TAGS = ("run_started", "prefill", "step", "run_finished")  # items that leave as a run's


class Worker(QObject):
    """Loads models, runs generations and streaming jobs, and computes on-demand analyses.

    Signals:
        sig_loading(float, str): progress of a model load.
        sig_loaded(object): ``ModelInfo`` of the model now loaded.
        sig_run_started(int, object): run id and its ``PromptTokens``.
        sig_prefill(int, object): run id and its ``PrefillCapture``.
        sig_step(int, object): run id and a ``StepRecord``.
        sig_run_finished(int, object): run id and its ``RunSummary``.
        sig_result(str, object, object): analysis kind, request key, result record.
        sig_error(str, str): where it happened ("load", "run", "analysis") and the message.
        sig_stream_item(int, str, object): job id, tag and payload of a streaming job's item
            (tag "error": the job failed, payload is the message).
        sig_prefix_reused(int, int, float): run id, prompt tokens read from the previous run's
            cache, and the TTFT saved (ms, estimated from the last full prefill).
        sig_history(object): (``ShownRun``, every ``BranchNode``) after a live run joined
            the history.
        sig_provides(object): before ``sig_loaded``, what the new engine fills (a
            ``Provides``; None: everything, a model loaded here).

    ``workbench`` owns the engine and the runs; ``queue`` the analyses asked for. Both are
    touched only on this thread, except ``submit``.
    """

    sig_loading = Signal(float, str)
    sig_loaded = Signal(object)
    sig_run_started = Signal(int, object)
    sig_prefill = Signal(int, object)
    sig_step = Signal(int, object)
    sig_run_finished = Signal(int, object)
    sig_result = Signal(str, object, object)
    sig_error = Signal(str, str)
    sig_stream_item = Signal(int, str, object)
    sig_prefix_reused = Signal(int, int, float)
    sig_history = Signal(object)
    sig_provides = Signal(object)

    def __init__(self, flags: WorkerFlags | None = None) -> None:
        super().__init__()
        self.flags = flags or WorkerFlags()
        self.workbench = Workbench(flags=self.flags)
        self.queue = AnalysisQueue()
        self._ahead_later = AfterDelays(self.work_ahead, self)  # guesses once nothing is asked
        self._trim = HeapTrim(lambda: self._release_memory(), self.queue.waiting, self)
        self.served: Any = None  # an OpenAIEngine or NdifEngine while one is open

    @Slot(object)
    def open_server(self, spec: Any) -> None:
        """Open a model behind an OpenAI-compatible server (a ``ServerSpec``): runs go to it
        from now on; the runs of the model before go."""
        from llm_lens.core.engines.openai.live import open_server

        self.flags.nothing_wanted()
        self.queue.new_job()
        try:
            opens = getattr(spec, "open", None)  # an NdifSpec opens its own engine
            engine = opens(self.sig_loading.emit) if opens else open_server(spec)
        except LensError as exc:
            self.sig_error.emit("load", str(exc))
            return
        except Exception as exc:  # a bug: one line, the traceback in a log
            self.sig_error.emit("load", _crash(f"opening the server {spec.base_url}", exc))
            return
        self.workbench.use(engine)  # type: ignore[arg-type]  # runs go through served_live
        self.served = engine
        self.sig_provides.emit(engine.provides)
        self.sig_loaded.emit(engine.info)

    @Slot(object, str, str, object, bool)
    def load(
        self,
        spec: object,
        device: str,
        dtype: str,
        placement: object = None,
        allow_partly_random: bool = False,
    ) -> None:
        self.flags.nothing_wanted()
        self.queue.new_job()
        try:
            name = spec if isinstance(spec, str) else None
            more = (placement, allow_partly_random)  # a core Placement (or None), the flag
            info = self.workbench.load(name, device, dtype, self.sig_loading.emit, *more)
            self.served = None
            _import_run_end()
        except LensError as exc:
            self.sig_error.emit("load", str(exc))
            return
        except Exception as exc:  # a bug, not a user mistake: one line here, the traceback in a log
            self.sig_error.emit("load", _crash(f"loading the model {spec or 'bundled'}", exc))
            return
        self.sig_provides.emit(None)
        self.sig_loaded.emit(info)

    @Slot(object)
    def run(self, request: RunRequest) -> None:
        """A live run (:meth:`Workbench.live`, or on a server ``served_live``): streamed like
        any job, then it joins the history; analyses between its steps take at most
        ``ANALYSIS_SHARE`` of its time."""
        served = self.served
        if getattr(served, "one_job_a_run", False):  # NDIF: one job a run
            from llm_lens.core.engines.ndif.live import ndif_live

            job: Any = lambda bench: ndif_live(served, request, bench.cancel, bench.store)  # noqa: E731
        elif served is not None:
            from llm_lens.core.engines.openai.live import served_live

            job = lambda bench: served_live(served, request, bench.cancel, bench.store)  # noqa: E731
        else:
            job = lambda bench: bench.live(request)  # noqa: E731
        self._drive(request.run_id, job, "run")

    @Slot(int, object)
    def stream(self, job_id: int, job: Any) -> None:
        """Run a streaming job on this thread: ``job(workbench)`` yields (tag, payload) pairs.

        Tags ``run_started``, ``prefill``, ``step`` and ``run_finished`` leave as the normal run
        signals with ``job_id`` as the run id (a branch streams like a run); any other tag as
        ``sig_stream_item``. Queued analyses are served between items; ``cancel`` stops it.
        A failure is the item ``("error", message)``.
        """
        self._drive(job_id, job, None)

    def _drive(self, job_id: int, job: Any, where: str | None) -> None:
        """Run ``job``'s items as signals; a failure goes to ``sig_error(where, …)``, or when
        ``where`` is None to ``sig_stream_item(job_id, "error", …)``."""
        import torch

        self.flags.nothing_wanted()
        self.queue.new_job()  # the guesses' run is no longer the one shown

        def fail(message: str) -> None:
            if where is None:
                self.sig_stream_item.emit(job_id, "error", message)
            else:
                self.sig_error.emit(where, message)

        if not self.workbench.loaded:
            fail("no model is loaded yet")
            return
        self.flags.cancel.clear()
        budgeted = where == "run"  # a live run: analyses between steps take ≤ ANALYSIS_SHARE
        try:
            with torch.inference_mode():  # outermost: the jobs interleave generators
                for tag, payload in job(self.workbench):
                    self._relay(job_id, tag, payload)
                    if not budgeted:
                        self._serve_pending()
                    elif tag == "step":
                        budget = self.queue.step(payload.position, decode_ms(payload))
                        self._serve_pending(budget_ms=budget)
        except LensError as exc:
            fail(str(exc))
        except Exception as exc:
            what = "running" if where == "run" else "a comparison job"
            fail(_crash(f"{what} on {self.workbench.model_name()}", exc))
        finally:
            # a long prompt's freed activations stay resident otherwise; not at once: glibc's
            # trim holds the heap's lock (120-140 ms after a full context) just as the window
            # renders the run's end, and the GUI thread stood still whenever it allocated
            self._trim.later(TRIM_DELAY_MS)

    def _relay(self, job_id: int, tag: str, payload: Any) -> None:
        """One item of a job as the signal that carries it."""
        if tag in RUN_TAGS:
            getattr(self, f"sig_{tag}").emit(job_id, payload)
        elif tag == "prefix_reused":
            self.sig_prefix_reused.emit(job_id, *payload)
        elif tag == "history":
            self.sig_history.emit(payload)
        else:
            self.sig_stream_item.emit(job_id, tag, payload)

    def let_go(self, held: list[Any]) -> None:
        """Free what ``held`` holds on this thread (any thread may call it; ``held`` is emptied
        here, between steps or once idle, as a queued job is).

        A run the history let go was last held by the window, and the GUI thread that dropped
        it (half a gigabyte of arrays at the full context) stood still 40-100 ms at the run's
        end, off the CPU, while this thread began the next run's work."""
        if held:
            self.submit("let_go", ("let_go", id(held)), lambda _bench: held.clear())

    @Slot()
    def _release_memory(self) -> None:
        from llm_lens.core.runtime import release_memory

        self._trim.owed = False
        release_memory()

    def submit(
        self, kind: str, key: Any, job: AnalysisJob, ahead: Sequence[AnalysisJob] = ()
    ) -> None:
        """Queue an analysis ``job(workbench)`` (any thread); it runs between steps or when
        idle. ``ahead``: jobs for the requests likely to follow it (see
        :meth:`AnalysisQueue.answered`); their results stay in the engine's memo, nothing is
        sent. A pending job of the same per-step kind is dropped and answered with a None
        result (which asks nothing to be cached: the request can be made again)."""
        for old_kind, old_key in self.queue.submit(kind, key, job, ahead):
            self.sig_result.emit(old_kind, old_key, None)

    @Slot()
    def serve(self) -> None:
        """Run queued analysis jobs now (connected to a queued signal from the GUI). This slot
        runs only while no run streams (a run's items serve between steps, within budget), so
        the jobs take every core: the window is waiting for them, not rendering a run."""
        from llm_lens.core.runtime import every_core

        with every_core():
            self._serve_pending()
        if self.queue.ahead and has_event_loop():
            self._ahead_later.ask(AHEAD_DELAY_MS)  # counted from the last answer, not the first

    def _wanted_else(self) -> bool:
        flags = self.flags
        return flags.wanted.is_set() or flags.closing.is_set() or self.queue.waiting()

    @Slot()
    def work_ahead(self) -> None:
        """Compute the requests likely to come next (``queue.ahead``, nearest first) while
        nothing is asked; a map gives way between its row blocks (``Halted``) to anything asked,
        and what it had done is dropped (the queries and keys it computed are kept). A job that
        fails here is dropped silently: asked for, it runs again and reports its error."""
        import torch

        from llm_lens.core.attention import Halted, halting
        from llm_lens.core.runtime import every_core

        spent = 0.0
        with every_core(), halting(self._wanted_else):
            while (guess := self.queue.next_guess()) is not None and not self._wanted_else():
                t0 = time.perf_counter()
                try:
                    with torch.inference_mode():
                        guess[1](self.workbench)
                except Halted:
                    return  # it stays first: the next request's serve schedules it again
                except Exception:  # noqa: BLE001 - a guess, not a request: see the docstring
                    pass
                took = (time.perf_counter() - t0) * 1e3
                spent += took
                self.queue.guessed(guess, took)
        if spent > RELEASE_AFTER_MS and not self._wanted_else():
            # what they freed (0.4 GB of heap after two maps at 8,192 tokens) goes back once a
            # person has stopped stepping: the next request reuses it meanwhile, where pages
            # given back cost a new layer's window 25-30 ms of faults
            self._trim.later(TRIM_IDLE_MS)

    def _serve_pending(self, budget_ms: float | None = None) -> None:
        """Run queued jobs: all of them, or while this run's analyses stay within ``budget_ms``."""
        spent = 0.0
        while not self.flags.closing.is_set():
            taken = self.queue.next_job(budget_ms)
            if taken is None:
                # give back what the analyses freed once their answer is drawn (not between
                # a run's steps: not worth it there)
                if budget_ms is None and (spent > RELEASE_AFTER_MS or self._trim.owed):
                    self._trim.later(TRIM_AFTER_ANSWER_MS)
                return
            (kind, key, job), ahead = taken
            t0 = time.perf_counter()
            answered, result = self._answer(kind, job)
            took = (time.perf_counter() - t0) * 1e3
            self.queue.timed(kind, took)
            spent += took
            if answered:
                self.sig_result.emit(kind, key, result)
                self.queue.answered(kind, took, ahead, between_steps=budget_ms is not None)

    def _answer(self, kind: str, job: Callable[[Workbench], Any]) -> tuple[bool, Any]:
        """(True, the job's result), or (False, None) after reporting its failure."""
        import torch

        if self.served is not None and kind not in FILE_JOBS:  # a server computes none:
            return True, None  # the panes say so (Pane.missing_line)
        try:
            with torch.inference_mode():
                return True, job(self.workbench)
        except (LensError, OSError, ValueError) as exc:  # bad file, full disk, no run
            self.sig_error.emit("analysis", f"{kind.replace('_', ' ')}: {exc}")
        except Exception as exc:
            doing = f"computing {kind.replace('_', ' ')} on {self.workbench.model_name()}"
            self.sig_error.emit("analysis", _crash(doing, exc))
        return False, None


def _import_run_end() -> None:
    """Import here what the GUI thread imports at a run's end (its autosave), or the first
    run's end holds the window 15-20 ms for it."""
    import importlib

    from llm_lens.core.loading import cache_root

    for name in ("assemble", "format", "views", "write"):  # SessionController.request_save's
        importlib.import_module(f"llm_lens.core.sessions.{name}")
    importlib.import_module("llm_lens.core.engines.openai.live")  # a save asks if it was served
    importlib.import_module("llm_lens.core.runs.served_branches")  # ... and for a served tree

    cache_root()  # platformdirs


def _crash(doing: str, exc: BaseException) -> str:
    """One line for a bug met on the model thread; the traceback goes to a log file."""
    from llm_lens.core.crashlog import report_crash

    return report_crash(doing, exc)
