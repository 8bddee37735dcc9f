"""Side-by-side runs that share one prefill, and how their distributions differ.

:func:`compare` reads the prompt once and forks its KV cache for every sampling configuration,
so each column samples from the very same step-0 logits; with the same seeds the tokens equal
those of separate :meth:`~core.engine.Engine.start` runs. Branching and prefix reuse live in
:mod:`core.branching`.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from llm_lens.core import sampling
from llm_lens.core.errors import SamplingError
from llm_lens.core.loop.engine import Engine, Run, RunConfig
from llm_lens.core.records import PromptTokens, RunSummary, StepRecord
from llm_lens.core.sampling import MAX_SAMPLES, SamplingParams, check_configs

KL_EPS = 1e-12


# --- distributions -------------------------------------------------------------------------------


def kl_divergence(p: np.ndarray, q: np.ndarray, eps: float = KL_EPS) -> float:
    """KL(p ‖ q) in nats: Σ_v p_v · (ln(p_v + ε) − ln(q_v + ε)); tokens with p_v = 0 add nothing.

    ε keeps a token that ``q`` filtered out (probability 0) finite: it costs about p_v · 27.6.
    """
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    on = p > 0
    return float(np.sum(p[on] * (np.log(p[on] + eps) - np.log(q[on] + eps))))


def mean_pairwise_kl(dists: Sequence[np.ndarray], eps: float = KL_EPS) -> float:
    """Mean of KL(p_i ‖ p_j) over the n·(n − 1) ordered pairs i ≠ j (KL is not symmetric)."""
    pairs = list(itertools.permutations(range(len(dists)), 2))
    return float(np.mean([kl_divergence(dists[i], dists[j], eps) for i, j in pairs]))


def mean_overlap(dists: Sequence[np.ndarray]) -> float:
    """Mean over pairs of Σ_v min(p_i,v, p_j,v): 1 for equal distributions, 0 for disjoint ones."""
    pairs = list(itertools.combinations(range(len(dists)), 2))
    mins = [np.minimum(np.asarray(dists[i], np.float64), dists[j]).sum() for i, j in pairs]
    return float(np.mean(mins))


def divergence_step(tokens: Sequence[Sequence[int]]) -> int | None:
    """First step index at which any two token lists choose differently; None if they never do
    within the shortest list."""
    for index, chosen in enumerate(zip(*tokens, strict=False)):
        if len(set(chosen)) > 1:
            return index
    return None


def final_probs(step: StepRecord, params: SamplingParams) -> np.ndarray:
    """(vocab,) float64: the step's distribution after the last sampling stage of ``params``.

    For greedy settings that is the raw (or repetition-penalised) softmax, not a one-hot.
    """
    final = sampling.stages_of(step.logits, step.context_ids, params)[-1]
    return final.probs[0].double().cpu().numpy()  # type: ignore[no-any-return]


# --- shared prefill ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnStats:
    """One column of a comparison. Log-probs are under the model's raw distribution."""

    length: int
    tokens_per_s: float
    mean_logprob: float
    perplexity: float  # exp(−mean logprob)
    finish_reason: str


class ColumnRun(Protocol):
    """What a comparison reads of each column: a live ``Run`` or a :class:`RecordedColumn`."""

    params: SamplingParams
    steps: list[StepRecord]

    @property
    def generated_ids(self) -> list[int]: ...

    def summary(self) -> RunSummary: ...

    def output_text(self) -> str: ...


@dataclass
class RecordedColumn:
    """A column read back from a session (a ``core.session.SessionRun``), for the metrics."""

    run_id: int
    prompt: PromptTokens
    params: SamplingParams
    steps: list[StepRecord]
    finish_reason: str | None

    @classmethod
    def of(cls, recorded: Any) -> RecordedColumn:
        fields = set(SamplingParams.__dataclass_fields__)
        params = SamplingParams(**{k: v for k, v in recorded.params.items() if k in fields})
        return cls(recorded.run_id, recorded.prompt, params, list(recorded.steps),
                   recorded.finish_reason)  # fmt: skip

    @property
    def generated_ids(self) -> list[int]:
        return [s.token.id for s in self.steps]

    def summary(self) -> RunSummary:
        return RunSummary.of(self.run_id, self.prompt, self.steps, self.finish_reason)

    def output_text(self) -> str:
        raw = b"".join(s.token.raw for s in self.steps if not s.token.special)
        return raw.decode("utf-8", errors="replace")


@dataclass
class Comparison:
    """Runs forked from one prefill. Metrics are computed from the runs' steps when asked.

    ``kl_per_step`` and ``overlap_per_step`` cover the steps every run reached while all contexts
    were still identical: up to and including :attr:`divergence_step` (after it the runs read
    different tokens, so their distributions answer different questions).
    """

    prompt: PromptTokens
    runs: Sequence[ColumnRun]
    shared_prefill_ms: float

    @classmethod
    def recorded(cls, runs: Sequence[Any], shared_prefill_ms: float) -> Comparison:
        """The comparison of columns saved in a session (``SessionRun``s of one prompt)."""
        columns = [RecordedColumn.of(r) for r in runs]
        return cls(columns[0].prompt, columns, shared_prefill_ms)

    @property
    def params(self) -> list[SamplingParams]:
        return [r.params for r in self.runs]

    @property
    def prefill_saved_ms(self) -> float:
        return self.shared_prefill_ms * (len(self.runs) - 1)

    def steps(self) -> Iterator[tuple[int, StepRecord]]:
        """Advance the runs round-robin, yielding (column, record) until every run has ended."""
        with torch.inference_mode():  # outermost, so the runs' own enter/exit cannot interleave
            live = {i: iter(run) for i, run in enumerate(self.runs) if isinstance(run, Run)}
            while live:
                for column, it in list(live.items()):
                    record = next(it, None)
                    if record is None:
                        del live[column]
                    else:
                        yield column, record

    def run_all(self) -> Comparison:
        for _ in self.steps():
            pass
        return self

    @property
    def divergence_step(self) -> int | None:
        return divergence_step([r.generated_ids for r in self.runs])

    def _shared_steps(self) -> range:
        last = self.divergence_step
        if last is None:
            last = min(len(r.steps) for r in self.runs) - 1
        return range(last + 1)

    def _final(self, index: int) -> list[np.ndarray]:
        return [final_probs(r.steps[index], r.params) for r in self.runs]

    @property
    def kl_per_step(self) -> list[float]:
        return [mean_pairwise_kl(self._final(i)) for i in self._shared_steps()]

    @property
    def overlap_per_step(self) -> list[float]:
        return [mean_overlap(self._final(i)) for i in self._shared_steps()]

    def columns(self) -> list[ColumnStats]:
        return [column_stats(r) for r in self.runs]


def column_stats(run: ColumnRun) -> ColumnStats:
    logprobs = [s.logprob for s in run.steps]
    mean = float(np.mean(logprobs)) if logprobs else 0.0
    summary = run.summary()
    return ColumnStats(
        len(logprobs), summary.tokens_per_s, mean, math.exp(-mean), summary.finish_reason
    )


def start_shared(
    engine: Engine,
    prompt: PromptTokens,
    configs: Sequence[SamplingParams],
    run_config: RunConfig,
    cancel: threading.Event | None = None,
) -> Comparison:
    """Prefill once now; return the comparison with its runs ready to iterate (:meth:`steps`)."""
    state = engine.prefill(prompt)
    event = cancel or threading.Event()
    runs = [engine.start_from(prompt, p, state.fork(), run_config, event) for p in configs]
    return Comparison(prompt, runs, state.forward_ms)


def compare(
    engine: Engine,
    prompt: PromptTokens,
    configs: list[SamplingParams],
    run_config: RunConfig,
    cancel: threading.Event | None = None,
) -> Comparison:
    """Run 2–4 sampling configurations side by side from one shared prefill, to the end."""
    check_configs(len(configs))
    return start_shared(engine, prompt, configs, run_config, cancel).run_all()


def samples(
    engine: Engine,
    prompt: PromptTokens,
    params: SamplingParams,
    k: int,
    seed0: int,
    run_config: RunConfig,
    cancel: threading.Event | None = None,
) -> Comparison:
    """K runs of the same settings with seeds seed0 … seed0 + K − 1, sharing one prefill."""
    if not 1 <= k <= MAX_SAMPLES:
        raise SamplingError(f"samples must be between 1 and {MAX_SAMPLES}; got {k}")
    configs = [params.with_(seed=seed0 + i) for i in range(k)]
    return start_shared(engine, prompt, configs, run_config, cancel).run_all()
