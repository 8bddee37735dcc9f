"""The step loop: one prefill over the prompt, then one cached forward per new token.

Every step yields a :class:`~llm_lens.core.records.StepRecord` built from the model's own
outputs. The loop records only what is cheap (last-position hidden states, the new query's
attention row, top-N logits, KV sizes); the logit lens and prompt attention maps are derived on
demand from a finished run's records and cache by :func:`llm_lens.core.loop.analyses.compute`
(which calls :mod:`llm_lens.core.layers` and :mod:`llm_lens.core.attention`), or read from a
session file's recording by :class:`llm_lens.core.sessions.views.RecordedAnalysis`.
"""

from __future__ import annotations

import inspect
import itertools
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from llm_lens.core import kvcache, sampling
from llm_lens.core.anatomy import Anatomy
from llm_lens.core.attention import (
    ATTN_IMPLEMENTATION,
    Tap,
    current_tap,
    tapping,
    use_lens_attention,
)
from llm_lens.core.attention.lens import differs_note
from llm_lens.core.attention.verdicts import route_checked
from llm_lens.core.errors import PromptError
from llm_lens.core.experts import RouterCapture
from llm_lens.core.interventions import Intervention, Patcher
from llm_lens.core.kvcache.measure import check_kept, step_feed
from llm_lens.core.kvcache.state import own_cache
from llm_lens.core.loading import LoadedModel
from llm_lens.core.loop.capture import Capture
from llm_lens.core.loop.clock import SOUND_SHARE, StepClock, measures_waits, off_cpu_share
from llm_lens.core.loop.finite import check_step
from llm_lens.core.loop.start import RunStart as RunStart  # re-exported: runs/ name it here
from llm_lens.core.loop.start import copy_cache as copy_cache
from llm_lens.core.loop.step_record import step_record
from llm_lens.core.placement import input_device
from llm_lens.core.records import (
    PrefillCapture,
    PromptTokens,
    RunSummary,
    StepRecord,
    frozen,
)
from llm_lens.core.runtime import synchronize
from llm_lens.core.sampling import SamplingParams
from llm_lens.core.tokens import TokenText, tokenize_prompt

EAGER_PREFILL_LIMIT = 256  # longer prompts prefill with SDPA: faster (3.0 s vs 5.2 s at 1,000
# tokens here), and eager would materialise 9 × T² attention floats a layer
_run_ids = itertools.count(1)


@dataclass(frozen=True)
class RunConfig:
    """What a run does besides sampling: how long it may go and when it stops."""

    max_new_tokens: int = 64
    stop_strings: tuple[str, ...] = ()
    top_n: int = 50

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise PromptError(f"max new tokens must be ≥ 1; got {self.max_new_tokens}")


class Engine:
    """Owns a loaded model; tokenizes prompts and starts runs. One thread uses it at a time."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.info = loaded.info
        self.anatomy = Anatomy.of(self.model)
        # GPT-1 (no cache) and CPM-Ant are fed the whole sequence every step, as generate()
        # feeds them: the uncached step mode (each step's cost grows with the context)
        self.feeds_whole, self.keeps_cache = step_feed(self.model)
        # attention through transformers' interface, recorded by our function: False for a
        # family whose attention bypasses it (no maps; every other pane still works)
        # (the check's verdict kept per weights: a reload of the same weights skips it)
        self.attention_maps = route_checked(self.model, self.info.weights_id)
        if not self.attention_maps and not self.info.attention_note:
            self.info = replace(self.info, attention_note=differs_note(self.model))
            loaded.info = self.info
        # the last layer's prompt maps (attention.prompt_maps.layer_maps)
        self.map_memo: dict[str, Any] = {}
        self.texts = TokenText(self.tokenizer)
        self.device = input_device(self.model)  # not `meta` where a device map offloaded it
        params = inspect.signature(self.model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        self.takes_positions = "position_ids" in params  # passed as generate() passes them
        self.eos_ids = self._eos_ids()
        # True where wall minus the model thread's CPU time is its waiting on this device (the
        # Timing pane's waits); None on the CPU, where the torch thread count decides it per run
        self.device_waits_checked = None if self.device.type == "cpu" else self._check_waits()

    def _check_waits(self) -> bool:
        """Does a forward pass and a copy of its logits to the host keep this thread on the CPU
        until the device is done (:func:`~llm_lens.core.loop.clock.off_cpu_share`)?"""
        try:
            return off_cpu_share(self._round_trip) < SOUND_SHARE
        except (RuntimeError, ValueError, TypeError):  # a forward this bare cannot run: a run
            return False  # shows its error; the waits are only not measured

    def _round_trip(self) -> None:
        """The model's forward over 8 tokens and its last logits copied to the host."""
        ids = torch.zeros((1, 8), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            self.model(input_ids=ids, use_cache=False).logits[0, -1].float().cpu()

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.model.generation_config, self.tokenizer):
            value = getattr(source, "eos_token_id", None)
            ids.update(value if isinstance(value, list) else [] if value is None else [value])
        return ids

    def tokenize(
        self, text: str, chat: bool = True, system: str | None = None, parse_special: bool = False
    ) -> PromptTokens:
        """The prompt's tokens; special-token text in ``text`` stays text unless
        ``parse_special`` (see :func:`llm_lens.core.tokens.tokenize_prompt`)."""
        return tokenize_prompt(
            self.tokenizer, text, chat, system, self.info.context_length, 1, parse_special
        )

    def start(
        self,
        prompt: PromptTokens,
        params: SamplingParams,
        config: RunConfig | None = None,
        cancel: threading.Event | None = None,
        interventions: Sequence[Intervention] = (),
    ) -> Run:
        """A run ready to iterate; nothing is computed until the first ``next()``.

        ``interventions`` (:mod:`llm_lens.core.interventions`) are checked against the model
        now (an :class:`~llm_lens.core.interventions.InterventionError` names a bad one) and
        hooked on for each of the run's forward passes only."""
        run = Run(self, prompt, params, config or RunConfig(), cancel or threading.Event())
        if interventions:
            run.patcher = Patcher(self.model, self.anatomy, interventions)
        return run

    def start_from(
        self,
        prompt: PromptTokens,
        params: SamplingParams,
        start: RunStart,
        config: RunConfig | None = None,
        cancel: threading.Event | None = None,
        interventions: Sequence[Intervention] = (),
    ) -> Run:
        """A run that begins from ``start`` (a cache holding a prefix of ``prompt``, and perhaps
        the prompt's logits) instead of an empty cache. The run owns and extends that cache;
        ``interventions`` are hooked on for its own passes (the cache must have been made under
        the same ones: :mod:`llm_lens.core.runs.prefix` keys it so)."""
        cached = start.cached_tokens
        fits = cached == len(prompt) if start.is_full else cached < len(prompt)
        if self.feeds_whole:  # the run reads the whole prompt itself (CPM-Ant's cache also
            # counts its own prefix): a prefill of it is kept, a partial cache is not needed
            start, fits = start if start.is_full else RunStart(self.new_cache()), True
        if not fits:
            raise PromptError(
                f"the start holds {cached} tokens, which does not fit a prompt of {len(prompt)}"
            )
        run_config, event = config or RunConfig(), cancel or threading.Event()
        run = Run(self, prompt, params, run_config, event, start=start)
        if interventions:
            run.patcher = Patcher(self.model, self.anatomy, interventions)
        return run

    def prefill(self, prompt: PromptTokens) -> RunStart:
        """Read the whole prompt once, captured exactly as a run's step 0 would be.

        The result's cache is never extended: :meth:`RunStart.fork` gives each run its own copy.
        """
        cache = self.new_cache()
        ids = torch.tensor([prompt.ids], device=self.device)  # (1, prompt_len)
        with torch.inference_mode():
            cap, logits, ms = captured_forward(self, ids, cache, len(prompt) <= EAGER_PREFILL_LIMIT)
        return RunStart(cache, logits, cap, ms)

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        own = own_cache(self.model)  # (an empty cache is falsy: its length is 0)
        return DynamicCache(config=self.model.config) if own is None else own

    def forward(self, ids: Any, cache: Any, eager: bool) -> Any:
        """One forward pass over ``ids`` (1, seq) extending ``cache``; returns last logits."""
        return self.forward_batch(ids, cache, eager)[0]  # (vocab,)

    def forward_batch(self, ids: Any, cache: Any, eager: bool) -> Any:
        """One forward pass over ``ids`` (batch, seq) extending ``cache``, with the model's eager
        attention (which builds the weights) or SDPA; returns the last logits (batch, vocab)."""
        tap = current_tap()
        if tap is None:
            with tapping(Tap(fast=not eager)):
                return self.forward_batch(ids, cache, eager)
        tap.fast = not eager
        # again when a reference or explain pass set another one (once, not every token)
        if self.attention_maps and self.model.config._attn_implementation != ATTN_IMPLEMENTATION:
            use_lens_attention(self.model)
        kw: dict[str, Any] = {self.cache_kw: cache, "use_cache": True} if self.keeps_cache else {}
        if self.takes_positions:  # Bamba numbers a cached token from 0 when not told
            past = kvcache.seen_tokens(cache)
            kw["position_ids"] = torch.arange(past, past + ids.shape[1], device=ids.device).expand(
                ids.shape[0], -1
            )  # (batch, seq)
        out = self.model(ids, logits_to_keep=1, **kw)
        return out.logits[:, -1]  # (batch, vocab)


def captured_forward(
    engine: Engine, ids: Any, cache: Any, eager: bool
) -> tuple[Capture, Any, float]:
    """One hooked forward pass: the capture, the last logits (vocab,) and its wall time in ms."""
    t0 = time.perf_counter()
    with Capture(engine.anatomy, fast=not eager) as cap, RouterCapture(engine.model, cap):
        logits = engine.forward(ids, cache, eager)
        synchronize(engine.device)
    return cap, logits, (time.perf_counter() - t0) * 1e3


@dataclass
class Run:
    """One generation: iterate it to get step records; it keeps its cache for later analysis."""

    engine: Engine
    prompt: PromptTokens
    params: SamplingParams
    config: RunConfig
    cancel: threading.Event
    run_id: int = field(default_factory=lambda: next(_run_ids))
    steps: list[StepRecord] = field(default_factory=list)
    prefill: PrefillCapture | None = None
    finish_reason: str | None = None
    cache: Any = None
    start: RunStart | None = None  # set by Engine.start_from: begin from this cache and logits
    generator: Any = None  # the sampler's torch.Generator; made from params.seed when None.
    # It is kept after the run, so a continuation draws exactly what a longer run would.
    patcher: Patcher | None = None  # the run's interventions, hooked on for its passes only
    _clock: StepClock | None = field(default=None, repr=False)
    _handed_over: float | None = field(default=None, repr=False)  # the last step's end

    def __iter__(self) -> Iterator[StepRecord]:
        with torch.inference_mode():
            yield from self._loop()

    def run_all(self) -> list[StepRecord]:
        for _ in self:
            pass
        return self.steps

    def _loop(self) -> Iterator[StepRecord]:
        eng = self.engine
        self.cache = eng.new_cache() if self.start is None else self.start.cache
        cached = 0 if self.start is None else self.start.cached_tokens
        fed = self.prompt.ids if eng.feeds_whole else self.prompt.ids[cached:]
        ids = torch.tensor([fed], device=eng.device)  # (1, uncached); all where fed whole
        context = list(self.prompt.ids)
        if self.generator is None:
            self.generator = sampling.make_generator(self.params, "cpu")
        threads = torch.get_num_threads()
        self._clock = clock = StepClock(
            measures_waits(eng.device, threads, eng.device_waits_checked)
        )
        self._handed_over = None  # a resumed iteration does not count the pause between
        try:
            yield from self._steps(ids, context)
        finally:
            clock.close()

    def _steps(self, ids: Any, context: list[int]) -> Iterator[StepRecord]:
        kv_before = 0
        while True:
            record = self._step(ids, context, self.generator, kv_before)
            kv_before = record.kv.bytes_total
            context.append(record.token.id)
            reason = self._finish_reason(record, context)
            if reason:
                record = replace(record, finish_reason=reason)
            self.steps.append(record)
            yield record
            if reason:
                self.finish_reason = reason
                return
            fed = context if self.engine.feeds_whole else [record.token.id]
            ids = torch.tensor([fed], device=self.engine.device)  # (1, 1); (1, all) fed whole

    def _step(self, ids: Any, context: list[int], generator: Any, kv_before: int) -> StepRecord:
        prefill = not self.steps
        position = len(context) - 1
        eager = not prefill or ids.shape[1] <= EAGER_PREFILL_LIMIT
        clock = self._clock or StepClock(False)
        m0 = clock.mark()
        between = 0.0 if self._handed_over is None else (m0[0] - self._handed_over) * 1e3
        cap, logits, known_ms = self._forward(ids, eager, prefill)
        check_step(
            self.engine, self.cache, cap, logits, context, len(self.steps), eager
        )  # no token
        # is chosen from NaN
        m1 = clock.mark()
        stages = sampling.run_stages(logits, [context], self.params)
        token_id = sampling.choose(stages[-1], self.params, generator)
        m2 = clock.mark()
        if prefill:
            if self.engine.keeps_cache:
                check_kept(
                    self.cache, self.engine.info.num_layers, type(self.engine.model).__name__
                )
            self._keep_prefill(cap)
        record = step_record(self, cap, logits, stages, token_id, position, context, kv_before)
        m3 = clock.mark()
        self._handed_over = m3[0]
        return replace(record, timing=clock.timing((m0, m1, m2, m3), between, known_ms))

    def _forward(self, ids: Any, eager: bool, prefill: bool) -> tuple[Capture, Any, float | None]:
        """The step's capture and last logits; with the cost in ms when a start read them."""
        start = self.start if prefill else None
        if start is not None and start.capture is not None and start.logits is not None:
            return start.capture, start.logits, start.forward_ms
        if self.patcher is None:
            cap, logits, _ = captured_forward(self.engine, ids, self.cache, eager)
        else:
            with self.patcher.active():
                cap, logits, _ = captured_forward(self.engine, ids, self.cache, eager)
        return cap, logits, None

    @property
    def interventions(self) -> tuple[Intervention, ...]:
        """What this run changed in the model's computation (() for a plain run)."""
        return () if self.patcher is None else self.patcher.interventions

    def _keep_prefill(self, cap: Capture) -> None:
        hidden = cap.take_positions()  # (layers + 1, T, hidden), read-only, ours
        if hidden.shape[1] > len(self.prompt):  # CPM-Ant's layers also read its own prefix
            hidden = frozen(hidden[:, -len(self.prompt) :])  # a copy: records never share memory
        first = len(self.prompt) - hidden.shape[1]  # > 0 when a start's cache held a prefix
        self.prefill = PrefillCapture(
            run_id=self.run_id,
            prompt=self.prompt,
            hidden=hidden,
            positions=frozen(np.arange(first, len(self.prompt)), np.int64),
        )

    def _finish_reason(self, record: StepRecord, context: list[int]) -> str | None:
        generated = len(self.steps) + 1
        if record.token.id in self.engine.eos_ids:
            return "eos"
        if self.config.stop_strings:
            text = self.engine.texts.join(context[len(self.prompt) :])
            if any(s and s in text for s in self.config.stop_strings):
                return "stop"
        if generated >= self.config.max_new_tokens:
            return "length"
        if len(context) >= self.engine.info.context_length:
            return "context"
        if self.cancel.is_set():
            return "cancelled"
        return None

    @property
    def generated_ids(self) -> list[int]:
        return [s.token.id for s in self.steps]

    def output_text(self) -> str:
        return self.engine.texts.join(self.generated_ids)

    def summary(self) -> RunSummary:
        return summarize_run(self)


def summarize_run(run: Run) -> RunSummary:
    """TTFT is the prefill step's whole time; inter-token latency averages the decode steps.
    An intervened run's summary lists its interventions under ``extra["interventions"]``."""
    summary = RunSummary.of(run.run_id, run.prompt, run.steps, run.finish_reason)
    if run.interventions:
        summary.extra["interventions"] = [i.to_dict() for i in run.interventions]
    return summary


def generate_text(
    engine: Engine,
    prompt: str,
    params: SamplingParams,
    chat: bool = True,
    interventions: Sequence[Intervention] = (),
    **run: Any,
) -> tuple[Run, Sequence[StepRecord]]:
    """Convenience for scripts and notebooks: tokenize, run to the end (with ``interventions``
    hooked on, if any), return run and steps."""
    r = engine.start(
        engine.tokenize(prompt, chat), params, RunConfig(**run), interventions=interventions
    )
    return r, r.run_all()
