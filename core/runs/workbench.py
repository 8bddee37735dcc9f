"""The model side of an exploration, usable from a script, a notebook or the window's model thread:
one :class:`Workbench` owns the engine, the runs (:class:`~llm_lens.core.runs.history.RunStore`
and :class:`~llm_lens.core.runs.history.RunHistory`), the cancellation flags and the prefix cache.

Its work comes as jobs: generators of ``(tag, payload)`` items, each payload a record, a tuple of
them or plain numbers. :meth:`Workbench.live` is the live run; the comparison, beam and branch
jobs are in :mod:`llm_lens.core.runs.jobs`. A caller iterates them (the window's worker turns each
item into a signal)::

    bench = Workbench(Engine(load_model()))
    request = RunRequest(1, "Explain transformers", True, GREEDY, RunConfig(max_new_tokens=8))
    steps = [payload for tag, payload in bench.live(request) if tag == "step"]

One thread uses a workbench at a time; other threads talk to it through its
:class:`~llm_lens.core.runs.flags.WorkerFlags`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from llm_lens.core.errors import Cancelled, PromptError
from llm_lens.core.loop.engine import Engine, Run, RunConfig
from llm_lens.core.records import PromptTokens
from llm_lens.core.runs.flags import WorkerFlags
from llm_lens.core.runs.history import RunHistory, RunStore
from llm_lens.core.runs.prefix import PrefixCache, joined_prefill
from llm_lens.core.sampling import SamplingParams

READY_WAIT_S = 0.3  # the longest a live run's prefill waits for the window to clear its panes

Item = tuple[str, Any]


@dataclass(frozen=True)
class RunRequest:
    """A live run asked for: its id, the prompt text, how to read it and how to sample."""

    run_id: int
    text: str
    chat: bool
    params: SamplingParams
    config: RunConfig
    parse_special: bool = False  # special-token text the user typed becomes control tokens
    interventions: tuple[Any, ...] = ()  # core.interventions values hooked on for the run
    heads: tuple[tuple[int, int], ...] = ()  # (layer, head) opened: an engine without whole
    # maps brings back their attention rows (NDIF; Provides.head_rows); the local one has all


class Workbench:
    """Owns the engine and the runs made on it; offers the live run as a job.

    ``store`` holds the runs that answer analyses now and those kept; ``history`` the tree of
    every live run's branches. With ``flags.reuse_prefix`` on, a live run reads only the prompt
    suffix the last finished run's cache does not hold.
    """

    def __init__(self, engine: Engine | None = None, flags: WorkerFlags | None = None) -> None:
        self._engine = engine
        self.flags = flags or WorkerFlags()
        self.store = RunStore()
        self.history = RunHistory()
        self._prefix: PrefixCache | None = None  # of the last finished run
        self._last_run: Run | None = None
        self._full_prefill: tuple[float, int] = (0.0, 0)  # (ms, tokens) of the last full one

    @property
    def engine(self) -> Engine:
        """The loaded model's engine (a :class:`PromptError` while none is loaded)."""
        if self._engine is None:
            raise PromptError("no model is loaded yet")
        return self._engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def loaded(self) -> bool:
        return self._engine is not None

    @property
    def cancel(self) -> threading.Event:
        """Set: the running job stops at its next step."""
        return self.flags.cancel

    def model_name(self) -> str:
        return str(getattr(getattr(self._engine, "info", None), "name", "no model"))

    def load(
        self,
        spec: str | None,
        device: str,
        dtype: str,
        progress: Callable[[float, str], None],
        placement: Any = None,
        allow_partly_random: bool = False,
    ) -> Any:
        """Load a model (``spec`` None: the bundled one) and make it this workbench's engine;
        every run kept belongs to the old model and goes; ``placement`` (a
        :class:`~llm_lens.core.placement.Placement`) spreads or quantizes it;
        ``allow_partly_random`` loads one whose files lack weights (marked in its ``ModelInfo``)
        rather than refusing it. Between stages a set
        ``flags.load_cancel`` stops it (:class:`Cancelled`; the previous model stays).
        Returns the new model's ``ModelInfo``."""
        from llm_lens.core.loading import load_model
        from llm_lens.core.tokens import cl100k

        self.flags.load_cancel.clear()

        def report(fraction: float, message: str) -> None:
            if self.flags.load_cancel.is_set():
                raise Cancelled("loading cancelled: the previous model is still loaded")
            progress(fraction, message)

        loaded = load_model(spec, device, dtype, report, placement, allow_partly_random)
        report(1.0, "ready")
        self.use(Engine(loaded))
        cl100k("warm-up")  # load the cl100k_base table here, not on a window's first render
        return loaded.info

    def use(self, engine: Engine) -> None:
        """Work on ``engine`` from now on; the runs of the previous one are let go."""
        self._engine = engine
        self.history.reset(self.store)
        self.store.clear()
        self._prefix = self._last_run = None

    # ----------------------------------------------------------------- the live run
    def live(self, request: RunRequest) -> Iterator[Item]:
        """A live run's items: ``run_started`` (PromptTokens), ``prefix_reused`` ((tokens read
        from the last run's cache, TTFT saved in ms), with prefix reuse on), ``prefill``,
        ``step`` (each StepRecord), ``run_finished`` (RunSummary), then ``history``
        ((ShownRun, every BranchNode)) once the run joined the history."""
        from llm_lens.core.runs.jobs import ShownRun

        prompt = self.engine.tokenize(request.text, request.chat,
                                      parse_special=request.parse_special)  # fmt: skip
        run, reused = self._start(prompt, request.params, request.config, request.interventions)
        run.run_id = request.run_id
        self.store.runs = {request.run_id: run}  # kept runs answer again when shown
        ready = self.flags.panes_ready
        if ready is not None:
            ready.clear()
        yield "run_started", prompt
        if ready is not None:
            ready.wait(READY_WAIT_S)
        for record in run:
            if record.index == 0:
                saved = self._after_prefill(run, reused)
                if saved is not None:
                    yield "prefix_reused", (reused, saved)
                yield "prefill", run.prefill
            yield "step", record
        yield "run_finished", run.summary()
        self._remember(run)
        shown = ShownRun.of(self.history.add_root(self.store, run))
        yield "history", (shown, self.history.nodes())

    def _start(self, prompt: PromptTokens, params: SamplingParams, config: RunConfig,
               interventions: tuple[Any, ...] = ()) -> tuple[Run, int]:  # fmt: skip
        """A run of ``prompt`` under ``interventions`` and how many prompt tokens it takes from
        the last run's cache (always 0 unless prefix reuse is on and the cache was made under
        the same interventions)."""
        if not self.flags.reuse_prefix or self._prefix is None:
            return self.engine.start(prompt, params, config, self.cancel, interventions), 0
        run, reuse = self._prefix.start(
            self.engine, prompt, params, config, self.cancel, interventions
        )
        return run, reuse.tokens_reused

    def _after_prefill(self, run: Run, reused: int) -> float | None:
        """Complete a reusing run's prefill capture; the TTFT the reuse saved (ms, estimated
        from the last full prefill), or None with prefix reuse off."""
        forward_ms = run.steps[0].timing.forward_ms
        if not reused:
            self._full_prefill = (forward_ms, len(run.prompt))
        if not self.flags.reuse_prefix:
            return None
        run.prefill = joined_prefill(self._last_run, run, reused)
        ms, tokens = self._full_prefill
        saved = ms * len(run.prompt) / tokens - forward_ms if reused and tokens else 0.0
        return max(0.0, saved)

    def _remember(self, run: Run) -> None:
        """Keep the finished run's cache for the next run's prefix reuse."""
        if run.prefill is None or run.prefill.hidden.shape[1] != len(run.prompt):
            return  # its hidden states do not cover the prompt: a later join could not either
        self._prefix = self._prefix or PrefixCache()
        self._prefix.remember(run)
        self._last_run = run
