"""The model's thread: a QObject living on one long-lived QThread that owns model and caches.

The GUI reaches it only through queued signals; cancellation of a running generation goes
through a ``threading.Event`` because a queued "cancel" slot would wait behind the loop.
Analysis requests that arrive during a run are served between steps, within a budget: at most
``ANALYSIS_SHARE`` of the run's decode steps' own time so far (the prefill's does not count), so
the window's questions cannot slow the decoding more than that; the rest wait for the run's end.
A job runs between steps only when its expected cost fits what is left: a kind never timed, or
timed too dear, waits for the end rather than stall one step.
A pending request of a per-step kind (the lens of step 5 while the pane now shows step 9) is
dropped when a newer one of that kind arrives.
An analysis that took long enough to be felt (a new layer's attention window at 8,192 tokens)
may name the requests likely to follow it (the maps a step away); the worker computes them
while it has nothing else to do, into the engine's memo, and gives way to anything asked of it
between their row blocks.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from PySide6.QtCore import QAbstractEventDispatcher, QObject, QTimer, Signal, Slot

ANALYSIS_SHARE = 0.03  # between steps of a run, analyses may take this share of the model's time
RELEASE_AFTER_MS = 200.0  # analyses that took this long may have freed much: release_memory
TRIM_DELAY_MS = 1500  # after a run, the freed heap goes back once the window has drawn its end
TRIM_AFTER_ANSWER_MS = 200  # ... and after long analyses once the window has drawn the answer
TRIM_IDLE_MS = 2000  # ... and after work ahead once nothing was asked for this long
READY_WAIT_S = 0.3  # the longest a live run's prefill waits for the window to clear its panes
SUPERSEDED = ("lens", "attention_map", "neighbours")  # a newer request drops a pending older one
AHEAD_AFTER_MS = 50.0  # an analysis that took this long has its likely successors computed ahead
AHEAD_DELAY_MS = 250  # ... starting this long after the last answer left: the window has drawn
# it, and a person stepping by holding a key down (a request every ~30-100 ms) is not guessed for


class AfterDelays(QObject):
    """Calls ``callback`` once the last of the delays asked for so far is over: a delay asked
    while others run supersedes them, whichever ends first. One-shot timers, not one restarted
    timer object (that one would outlive the thread); a child of the object whose thread runs
    the callback, so it moves with it and goes with it."""

    def __init__(self, callback: Callable[[], Any], parent: QObject) -> None:
        super().__init__(parent)
        self._callback = callback
        self._asked = self._over = 0

    def ask(self, delay_ms: int) -> None:
        self._asked += 1
        QTimer.singleShot(delay_ms, self._one_over)

    @Slot()
    def _one_over(self) -> None:
        self._over += 1
        if self._over == self._asked:
            self._callback()


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
        sig_stream_item(int, str, object): job id, tag and payload of a streaming job's item
            (tag "error": the job failed, payload is the message).
        sig_prefix_reused(int, int, float): run id, prompt tokens read from the previous run's
            cache, and the TTFT saved (ms, estimated from the last full prefill).
        sig_history(object): (``ShownRun``, every ``BranchNode``) after a live run joined
            the history.

    It owns the runs: ``store`` (:class:`~llm_lens.core.runs.history.RunStore`: the runs that
    answer analyses and those kept) and ``history`` (the tree of every live run's branches).
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

    def __init__(self) -> None:
        super().__init__()
        from llm_lens.core.runs.history import RunHistory, RunStore

        self.engine: Any = None
        self.store = RunStore()
        self.history = RunHistory()
        self.cancel = threading.Event()
        self.load_cancel = threading.Event()
        self.pending: queue.Queue[tuple[str, Any, Callable[[], Any]]] = queue.Queue()
        self.reuse_prefix = False  # runs read only the prompt suffix the last run did not hold
        self._prefix: Any = None  # core.branching.PrefixCache of the last finished run
        self._last_run: Any = None
        self._full_prefill: tuple[float, int] = (0.0, 0)  # (ms, tokens) of the last full one
        self.analysis_ms = 0.0  # time analyses took between the current run's steps
        self.cost_ms: dict[str, float] = {}  # the last time each kind of analysis took
        # ... and the context length it took that at: most analyses grow with the context, so a
        # map timed on a 40-token prompt must not be taken as cheap beside a 1,000-token one
        self.cost_tokens: dict[str, int] = {}
        self.context_tokens = 1  # the tokens the current (or last) run's newest step had read
        self.closing = threading.Event()  # the window is closing: queued analyses are skipped
        # set by a window: a live run's prefill starts once the panes have cleared for it (at
        # most READY_WAIT_S later), so the GUI's work does not land inside the model's TTFT
        self.panes_ready: threading.Event | None = None
        # set by the window when it asks for a run, a load or a streaming job: work done ahead
        # of requests stops for it (a queued analysis is seen in ``pending``)
        self.wanted = threading.Event()
        self.ahead: list[tuple[str, Callable[[], Any]]] = []  # (kind, job) likely to come next
        self.slow: set[str] = set()  # kinds that took AHEAD_AFTER_MS or more on this run
        self._ahead_of: dict[Any, tuple[Callable[[], Any], ...]] = {}  # a pending job's
        # work ahead once no answer came for AHEAD_DELAY_MS; the heap trimmed after the last
        # delay asked (_trim_later)
        self._ahead_later = AfterDelays(self.work_ahead, self)
        self._trim_after = AfterDelays(self._trim_if_idle, self)
        self._trim_owed = False  # analyses freed much and the heap has not gone back since

    @Slot(object, str, str)
    def load(self, spec: object, device: str, dtype: str) -> None:
        from llm_lens.core.errors import LensError
        from llm_lens.core.loading import load_model
        from llm_lens.core.loop.engine import Engine

        self.load_cancel.clear()
        self.wanted.clear()
        self.ahead.clear()
        self.slow.clear()
        try:
            loaded = load_model(
                spec if isinstance(spec, str) else None, device, dtype, self._progress
            )
            self._progress(1.0, "ready")
            self.engine = Engine(loaded)
            self.history.reset(self.store)  # every kept run belongs to the old model
            self.store.clear()
            from llm_lens.core.tokens import cl100k

            cl100k("warm-up")  # load the cl100k_base table here, not on the GUI's first render
            _import_run_end()
            self._prefix = self._last_run = None
        except LensError as exc:
            self.sig_error.emit("load", str(exc))
            return
        except Exception as exc:  # a bug, not a user mistake: one line here, the traceback in a log
            self.sig_error.emit("load", _crash(f"loading the model {spec or 'bundled'}", exc))
            return
        self.sig_loaded.emit(loaded.info)

    def _progress(self, fraction: float, message: str) -> None:
        """Report load progress; between stages, honour a cancel request (the previous model
        stays loaded)."""
        from llm_lens.core.errors import Cancelled

        if self.load_cancel.is_set():
            raise Cancelled("loading cancelled: the previous model is still loaded")
        self.sig_loading.emit(fraction, message)

    @Slot(int, str, bool, object, object, bool)
    def run(
        self,
        run_id: int,
        text: str,
        chat: bool,
        params: object,
        config: object,
        parse_special: bool = False,
    ) -> None:
        """A live run: streamed like any job, then it joins the history."""
        job = lambda _w: self._live(run_id, text, chat, params, config, parse_special)  # noqa: E731
        self._drive(run_id, job, "run")

    def _live(
        self, run_id: int, text: str, chat: bool, params: Any, config: Any, parse_special: bool
    ) -> Iterator[tuple[str, Any]]:
        from llm_lens.core.runs.jobs import ShownRun

        prompt = self.engine.tokenize(text, chat, parse_special=parse_special)
        run, reused = self._start(prompt, params, config)
        run.run_id = run_id
        self.store.runs = {run_id: run}  # kept runs answer again when shown (register_job)
        ready = self.panes_ready
        if ready is not None:
            ready.clear()
        yield "run_started", prompt
        if ready is not None:
            ready.wait(READY_WAIT_S)
        for record in run:
            if record.index == 0:
                self._after_prefill(run, reused)
                yield "prefill", run.prefill
            yield "step", record
        yield "run_finished", run.summary()
        self._remember(run)
        shown = ShownRun.of(self.history.add_root(self.store, run))
        self.sig_history.emit((shown, self.history.nodes()))

    def _start(self, prompt: Any, params: Any, config: Any) -> tuple[Any, int]:
        """A run of ``prompt`` and how many prompt tokens it takes from the last run's cache
        (always 0 unless ``reuse_prefix`` is on)."""
        if not self.reuse_prefix or self._prefix is None:
            return self.engine.start(prompt, params, config, self.cancel), 0
        run, reuse = self._prefix.start(self.engine, prompt, params, config, self.cancel)
        return run, reuse.tokens_reused

    def _after_prefill(self, run: Any, reused: int) -> None:
        """Complete a reusing run's prefill capture and report what the reuse saved."""
        forward_ms = run.steps[0].timing.forward_ms
        if not reused:
            self._full_prefill = (forward_ms, len(run.prompt))
        if not self.reuse_prefix:
            return
        from llm_lens.core.runs.prefix import joined_prefill

        run.prefill = joined_prefill(self._last_run, run, reused)
        ms, tokens = self._full_prefill
        saved = ms * len(run.prompt) / tokens - forward_ms if reused and tokens else 0.0
        self.sig_prefix_reused.emit(run.run_id, reused, max(0.0, saved))

    def _remember(self, run: Any) -> None:
        """Keep the finished run's cache for the next run's prefix reuse."""
        from llm_lens.core.runs.prefix import PrefixCache

        if run.prefill is None or run.prefill.hidden.shape[1] != len(run.prompt):
            return  # its hidden states do not cover the prompt: a later join could not either
        self._prefix = self._prefix or PrefixCache()
        self._prefix.remember(run)
        self._last_run = run

    @Slot(int, object)
    def stream(self, job_id: int, job: Any) -> None:
        """Run a streaming job on this thread: ``job(worker)`` yields (tag, payload) pairs.

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

        from llm_lens.core.errors import LensError

        self.wanted.clear()
        self.ahead.clear()  # their run is no longer the one shown
        self.slow.clear()

        def fail(message: str) -> None:
            if where is None:
                self.sig_stream_item.emit(job_id, "error", message)
            else:
                self.sig_error.emit(where, message)

        if self.engine is None:
            fail("no model is loaded yet")
            return
        self.cancel.clear()
        as_run = {
            "run_started": self.sig_run_started,
            "prefill": self.sig_prefill,
            "step": self.sig_step,
            "run_finished": self.sig_run_finished,
        }
        budgeted = where == "run"  # a live run: analyses between steps take ≤ ANALYSIS_SHARE
        self.analysis_ms = model_ms = 0.0
        try:
            with torch.inference_mode():  # outermost: the jobs interleave generators
                for tag, payload in job(self):
                    signal = as_run.get(tag)
                    if signal is not None:
                        signal.emit(job_id, payload)
                    else:
                        self.sig_stream_item.emit(job_id, tag, payload)
                    if not budgeted:
                        self._serve_pending()
                    elif tag == "step":
                        self.context_tokens = int(payload.position) + 1
                        model_ms += _decode_ms(payload)
                        self._serve_pending(budget_ms=ANALYSIS_SHARE * model_ms)
        except LensError as exc:
            fail(str(exc))
        except Exception as exc:
            what = "running" if where == "run" else "a comparison job"
            fail(_crash(f"{what} on {self._model_name()}", exc))
        finally:
            # a long prompt's freed activations stay resident otherwise; not at once: glibc's
            # trim holds the heap's lock (120-140 ms after a full context) just as the window
            # renders the run's end, and the GUI thread stood still whenever it allocated
            self._trim_later(TRIM_DELAY_MS)

    def let_go(self, held: list[Any]) -> None:
        """Free what ``held`` holds on this thread (any thread may call it; ``held`` is emptied
        here, between steps or once idle, as a queued job is).

        A run the history let go was last held by the window, and the GUI thread that dropped
        it (half a gigabyte of arrays at the full context) stood still 40-100 ms at the run's
        end, off the CPU, while this thread began the next run's work."""
        if held:
            self.submit("let_go", ("let_go", id(held)), held.clear)

    def _trim_later(self, delay_ms: int) -> None:
        """Give the freed heap back ``delay_ms`` after now, or once every delay asked before is
        over where one ends later (a request answered meanwhile asks its own), or at once on a
        thread with no event loop (a script driving the worker).

        A run's end asks for :data:`TRIM_DELAY_MS`, long analyses' last answer for
        :data:`TRIM_AFTER_ANSWER_MS`: each time the window is drawing what it was just sent, and
        the trim made it wait (a full context's map drawn in 72-85 ms instead of 40). A delay
        ends only when this thread's event loop runs, so a run's end's was due the moment the
        prompt's analyses were served, 4 s later: exactly when their answer was drawn. Work
        ahead asks for :data:`TRIM_IDLE_MS`: the request it guessed reuses the heap first."""
        self._trim_owed = True
        if QAbstractEventDispatcher.instance() is None:
            self._release_memory()
            return
        self._trim_after.ask(delay_ms)

    def _trim_if_idle(self) -> None:
        """The last delay asked for is over: trim, unless a request waits (its serve asks
        again)."""
        if self.pending.empty():
            self._release_memory()

    @Slot()
    def _release_memory(self) -> None:
        from llm_lens.core.runtime import release_memory

        self._trim_owed = False
        release_memory()

    def _model_name(self) -> str:
        return str(getattr(getattr(self.engine, "info", None), "name", "no model"))

    def submit(
        self, kind: str, key: Any, job: Callable[[], Any], ahead: tuple[Callable[[], Any], ...] = ()
    ) -> None:
        """Queue an analysis job (any thread); it runs between steps or when idle. ``ahead``:
        jobs for the requests likely to follow it, run while idle if a job of this kind took
        long on this run (:data:`AHEAD_AFTER_MS`: stepping from one guessed answer to the next
        goes on guessing); their results stay in the engine's memo, nothing is sent.

        A pending job of the same per-step kind is dropped and answered with a None result
        (which asks nothing to be cached: the request can be made again)."""
        dropped = []
        if kind in SUPERSEDED:
            with self.pending.mutex:
                dropped = [item for item in self.pending.queue if item[0] == kind]
                for item in dropped:
                    self.pending.queue.remove(item)
                    self._ahead_of.pop(item[1], None)
        for old_kind, old_key, _ in dropped:
            self.sig_result.emit(old_kind, old_key, None)
        if ahead:
            with self.pending.mutex:
                self._ahead_of[key] = ahead
        self.pending.put((kind, key, job))

    @Slot()
    def serve(self) -> None:
        """Run queued analysis jobs now (connected to a queued signal from the GUI). This slot
        runs only while no run streams (a run's items serve between steps, within budget), so
        the jobs take every core: the window is waiting for them, not rendering a run."""
        from llm_lens.core.runtime import every_core

        with every_core():
            self._serve_pending()
        if self.ahead and QAbstractEventDispatcher.instance() is not None:
            self._ahead_later.ask(AHEAD_DELAY_MS)  # counted from the last answer, not the first

    def _wanted_else(self) -> bool:
        return self.wanted.is_set() or self.closing.is_set() or not self.pending.empty()

    @Slot()
    def work_ahead(self) -> None:
        """Compute the requests likely to come next (:attr:`ahead`, nearest first) while nothing
        is asked; a map gives way between its row blocks (``Halted``) to anything asked, and
        what it had done is dropped (the queries and keys it computed are kept). A job that
        fails here is dropped silently: asked for, it runs again and reports its error."""
        import time

        import torch

        from llm_lens.core.attention import Halted, halting
        from llm_lens.core.runtime import every_core

        spent = 0.0
        with every_core(), halting(self._wanted_else):
            while self.ahead and not self._wanted_else():
                kind, job = first = self.ahead[0]
                t0 = time.perf_counter()
                try:
                    with torch.inference_mode():
                        job()
                except Halted:
                    return  # it stays first: the next request's serve schedules it again
                except Exception:  # noqa: BLE001 - a guess, not a request: see the docstring
                    pass
                took = (time.perf_counter() - t0) * 1e3
                spent += took
                if took >= AHEAD_AFTER_MS:
                    self.slow.add(kind)
                if self.ahead and self.ahead[0] is first:
                    self.ahead.pop(0)
        if spent > RELEASE_AFTER_MS and not self._wanted_else():
            # what they freed (0.4 GB of heap after two maps at 8,192 tokens) goes back once a
            # person has stopped stepping: the next request reuses it meanwhile, where pages
            # given back cost a new layer's window 25-30 ms of faults
            self._trim_later(TRIM_IDLE_MS)

    def _next_job(self, budget_ms: float | None) -> tuple[str, Any, Callable[[], Any]] | None:
        """The oldest queued job, or the oldest whose last cost fits what is left of the budget
        (a kind not yet timed fits only before anything was spent)."""
        if budget_ms is None:
            try:
                job: tuple[str, Any, Callable[[], Any]] = self.pending.get_nowait()
            except queue.Empty:
                return None
            return job
        left = budget_ms - self.analysis_ms
        with self.pending.mutex:
            for item in self.pending.queue:
                cost = self._expected_ms(item[0])
                if cost <= left:
                    self.pending.queue.remove(item)
                    chosen: tuple[str, Any, Callable[[], Any]] = item
                    return chosen
        return None

    def _expected_ms(self, kind: str) -> float:
        """What ``kind`` should cost now: its estimate, scaled up with the context when it was
        timed on a shorter one; a kind not yet timed is taken as too dear to run between steps."""
        if kind not in self.cost_ms:
            return float("inf")
        timed_at = self.cost_tokens.get(kind, self.context_tokens)
        return self.cost_ms[kind] * max(1.0, self.context_tokens / max(1, timed_at))

    def _timed(self, kind: str, ms: float) -> None:
        """Keep ``kind``'s cost estimate: the time it just took, or half the estimate when that
        is more. A request answered from a memo (a prompt map kept from the last one) takes no
        time, and must not make the next one, which computes, look free."""
        before = self._expected_ms(kind)
        self.cost_ms[kind] = max(ms, 0.5 * before) if before != float("inf") else ms
        self.cost_tokens[kind] = self.context_tokens
        self.analysis_ms += ms

    def _serve_pending(self, budget_ms: float | None = None) -> None:
        """Run queued jobs: all of them, or while this run's analyses stay within ``budget_ms``."""
        import time

        import torch

        from llm_lens.core.errors import LensError

        spent = 0.0
        while not self.closing.is_set():
            item = self._next_job(budget_ms)
            if item is None:
                # give back what the analyses freed once their answer is drawn (not between
                # a run's steps: not worth it there)
                if budget_ms is None and (spent > RELEASE_AFTER_MS or self._trim_owed):
                    self._trim_later(TRIM_AFTER_ANSWER_MS)
                return
            kind, key, job = item
            with self.pending.mutex:
                ahead = self._ahead_of.pop(key, ())
            t0 = time.perf_counter()
            try:
                with torch.inference_mode():
                    result = job()
            except (LensError, OSError, ValueError) as exc:  # bad file, full disk, no run
                self.sig_error.emit("analysis", f"{kind.replace('_', ' ')}: {exc}")
                continue
            except Exception as exc:
                doing = f"computing {kind.replace('_', ' ')} on {self._model_name()}"
                self.sig_error.emit("analysis", _crash(doing, exc))
                continue
            finally:
                took = (time.perf_counter() - t0) * 1e3
                self._timed(kind, took)
                spent += took
            self.sig_result.emit(kind, key, result)
            if took >= AHEAD_AFTER_MS:
                self.slow.add(kind)
            if ahead and kind in self.slow and budget_ms is None:  # (a run's steps keep theirs)
                self.ahead = [(kind, job) for job in ahead]


def _import_run_end() -> None:
    """Import here what the GUI thread imports at a run's end (its autosave), or the first
    run's end holds the window 15-20 ms for it."""
    import importlib

    from llm_lens.core.loading import cache_root

    for name in ("assemble", "format", "views", "write"):  # SessionController.request_save's
        importlib.import_module(f"llm_lens.core.sessions.{name}")

    cache_root()  # platformdirs


def _decode_ms(record: Any) -> float:
    """What a step adds to the analyses' budget: a decode step's own time; the prefill none.

    A long prompt's prefill (seconds) would otherwise pay for seconds of analyses between the
    first decode steps, each of them then several times its headless time."""
    return 0.0 if record.index == 0 else float(record.timing.total_ms)


def _crash(doing: str, exc: BaseException) -> str:
    """One line for a bug met on the model thread; the traceback goes to a log file."""
    from llm_lens.core.crashlog import report_crash

    return report_crash(doing, exc)
