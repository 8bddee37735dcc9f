"""Side-by-side runs that share one prefill, and how their distributions differ.

:func:`compare` reads the prompt once and forks its KV cache for every sampling configuration,
so each column samples from the very same step-0 logits; with the same seeds the tokens equal
those of separate :meth:`~core.loop.engine.Engine.start` runs. Branching and prefix reuse live in
:mod:`core.runs.branching`.
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
from llm_lens.core.interventions import Forget, Intervention, ResidualAdd, ResidualPatch
from llm_lens.core.loop.engine import Engine, Run, RunConfig
from llm_lens.core.records import PromptTokens, RunSummary, StepRecord
from llm_lens.core.sampling import MAX_SAMPLES, SamplingParams, check_configs
from llm_lens.core.tokens import bytes_text

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


def pairwise(dists: np.ndarray, eps: float = KL_EPS) -> tuple[np.ndarray, np.ndarray]:
    """(KL, overlap) matrices of the rows of ``dists`` (n, vocab): ``kl[a, b]`` = KL(p_a ‖ p_b)
    as :func:`kl_divergence` defines it, ``overlap[a, b]`` = Σ_v min(p_a,v, p_b,v)."""
    d = np.asarray(dists, np.float64)
    logs = np.log(d + eps)  # (n, vocab); a zero p_a,v adds 0 · finite = 0, as in kl_divergence
    kl = (d * logs).sum(1)[:, None] - d @ logs.T
    overlap = np.eye(len(d)) * d.sum(1)
    for a in range(len(d) - 1):
        overlap[a, a + 1 :] = overlap[a + 1 :, a] = np.minimum(d[a], d[a + 1 :]).sum(1)
    return np.maximum(kl, 0.0), overlap


def _mean_off_diagonal(matrix: np.ndarray) -> float:
    n = matrix.shape[0]
    return float((matrix.sum() - np.trace(matrix)) / (n * (n - 1))) if n > 1 else math.nan


def _settings_key(params: SamplingParams) -> SamplingParams:
    """Settings that give the same distribution (only the seed differs) share one key."""
    return params.with_(seed=0)


@dataclass(frozen=True)
class CompareCurves:
    """Per-step curves of a comparison, one point per step of its longest column.

    ``kl``/``overlap`` (teacher-forced): at step i, each column's text (the model's logits on
    its own tokens so far) is scored under every column's sampler settings, and the mean
    pairwise KL / overlap between those settings is averaged over the texts that reached step
    i. They say what the settings alone change, on the same text, at every step; for K samples
    of one setting they are 0. ``own_kl``/``own_overlap``: between the distributions each
    column sampled from, each on its own text. Both agree up to the divergence step; after it
    the own curves also measure how far the texts have led the model apart (NaN where fewer
    than two columns reached the step).
    """

    kl: tuple[float, ...]
    overlap: tuple[float, ...]
    own_kl: tuple[float, ...]
    own_overlap: tuple[float, ...]


def comparison_curves(runs: Sequence[ColumnRun]) -> CompareCurves:
    """The curves of :class:`CompareCurves` from the columns' recorded logits.

    A column's step-i logits are the model's logits on the prompt and its first i tokens (its
    KV-cached decode gives what one forward pass over those tokens gives), so scoring a text
    under other settings needs no new forward pass: only their sampler stages.
    """
    keys = [_settings_key(r.params) for r in runs]
    distinct = list(dict.fromkeys(keys))
    index = np.array([distinct.index(k) for k in keys])
    out: tuple[list[float], ...] = ([], [], [], [])
    for i in range(max((len(r.steps) for r in runs), default=0)):
        texts = [j for j, r in enumerate(runs) if len(r.steps) > i]
        kls, overlaps, own = [], [], []
        for j in texts:
            step = runs[j].steps[i]
            dists = np.stack([final_probs(step, p) for p in distinct])  # (settings, vocab)
            kl, overlap = pairwise(dists)
            kls.append(_mean_off_diagonal(kl[np.ix_(index, index)]))
            overlaps.append(_mean_off_diagonal(overlap[np.ix_(index, index)]))
            own.append(dists[index[j]])
        own_kl, own_overlap = pairwise(np.stack(own))
        row = (float(np.mean(kls)), float(np.mean(overlaps)), _mean_off_diagonal(own_kl),
               _mean_off_diagonal(own_overlap))  # fmt: skip
        for values, value in zip(out, row, strict=True):
            values.append(value)
    return CompareCurves(*(tuple(v) for v in out))


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
    """A column read back from a session (a ``SessionRun``), for the metrics."""

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
        return bytes_text(raw)


@dataclass
class Comparison:
    """Runs forked from one prefill. Metrics are computed from the runs' steps when asked.

    ``kl_per_step`` and ``overlap_per_step`` have one point per step of the longest run: the
    teacher-forced curves of :class:`CompareCurves`; ``own_kl_per_step`` and
    ``own_overlap_per_step`` compare the distributions each run sampled from.
    """

    prompt: PromptTokens
    runs: Sequence[ColumnRun]
    shared_prefill_ms: float
    own_prefill: tuple[bool, ...] = ()  # per column: it read the prompt itself (interventions)

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
        sharing = len(self.runs) - sum(self.own_prefill)
        return self.shared_prefill_ms * max(sharing - 1, 0)

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

    def curves(self) -> CompareCurves:
        """The per-step curves, computed once the runs stop growing (memoised on their lengths)."""
        lengths = tuple(len(r.steps) for r in self.runs)
        memo = self.__dict__.get("_curves")
        if memo is None or memo[0] != lengths:
            memo = (lengths, comparison_curves(self.runs))
            self.__dict__["_curves"] = memo
        return memo[1]

    @property
    def kl_per_step(self) -> list[float]:
        return list(self.curves().kl)

    @property
    def overlap_per_step(self) -> list[float]:
        return list(self.curves().overlap)

    @property
    def own_kl_per_step(self) -> list[float]:
        return list(self.curves().own_kl)

    @property
    def own_overlap_per_step(self) -> list[float]:
        return list(self.curves().own_overlap)

    def columns(self) -> list[ColumnStats]:
        return [column_stats(r) for r in self.runs]


def column_stats(run: ColumnRun) -> ColumnStats:
    logprobs = [s.logprob for s in run.steps]
    mean = float(np.mean(logprobs)) if logprobs else 0.0
    summary = run.summary()
    return ColumnStats(
        len(logprobs), summary.tokens_per_s, mean, math.exp(-mean), summary.finish_reason
    )


def changes_prompt(interventions: Sequence[Intervention], prompt_len: int) -> bool:
    """Whether ``interventions`` change the pass that reads the prompt, so a run under them
    cannot start from a clean shared prefill: every kind does, except a residual edit or a
    forgotten token placed only at positions after the prompt (generated tokens)."""

    def after_prompt(item: Intervention) -> bool:
        if isinstance(item, ResidualAdd | ResidualPatch):
            return bool(item.positions) and min(item.positions) >= prompt_len
        return isinstance(item, Forget) and item.position >= prompt_len

    return not all(after_prompt(i) for i in interventions)


def start_shared(
    engine: Engine,
    prompt: PromptTokens,
    configs: Sequence[SamplingParams],
    run_config: RunConfig,
    cancel: threading.Event | None = None,
    interventions: Sequence[Sequence[Intervention]] = (),
) -> Comparison:
    """Prefill once now; return the comparison with its runs ready to iterate (:meth:`steps`).

    ``interventions`` holds each column's (empty: every column clean). A column whose changes
    leave the prompt's pass alone (:func:`changes_prompt`) forks the shared prefill like a clean
    one; any other reads the prompt itself, under its changes, in its first step."""
    changes = [tuple(c) for c in interventions] or [()] * len(configs)
    if len(changes) != len(configs):
        raise SamplingError(f"{len(changes)} intervention lists for {len(configs)} columns")
    own = tuple(changes_prompt(c, len(prompt)) if c else False for c in changes)
    state = engine.prefill(prompt) if not all(own) else None
    event = cancel or threading.Event()
    runs = [
        engine.start(prompt, p, run_config, event, c)
        if mine or state is None
        else engine.start_from(prompt, p, state.fork(), run_config, event, c)
        for p, c, mine in zip(configs, changes, own, strict=True)
    ]
    ms = state.forward_ms if state is not None else 0.0
    return Comparison(prompt, runs, ms, own)


def compare(
    engine: Engine,
    prompt: PromptTokens,
    configs: list[SamplingParams],
    run_config: RunConfig,
    cancel: threading.Event | None = None,
    interventions: Sequence[Sequence[Intervention]] = (),
) -> Comparison:
    """Run 2–4 sampling configurations side by side from one shared prefill, to the end (each
    column under its own ``interventions``, see :func:`start_shared`)."""
    check_configs(len(configs))
    return start_shared(engine, prompt, configs, run_config, cancel, interventions).run_all()


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
