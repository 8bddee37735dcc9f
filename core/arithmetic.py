"""The arithmetic behind the pictures, computed from records: no model, no Qt.

What the explainer cards and the tour say is derived here, from the numbers a record holds:
the softmax of the top logits written out step by step, the token a seeded sampler would draw
at a step under other settings, and attention patterns a head shows (a sink on the first
token, a previous-token head), measured, never assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_lens.core.records import StepRecord
from llm_lens.core.sampling import SamplingParams, make_generator, staged

SINK_SHARE = 0.5  # mean weight on the first token above which a head is called a sink
PREVIOUS_SHARE = 0.5  # mean weight on the previous token above which it is a previous-token head


@dataclass(frozen=True)
class SoftmaxRow:
    """One token's way from logit to probability: p = exp(z − max) / Σ exp(z_j − max)."""

    token_id: int
    text: str
    logit: float
    shifted: float  # z − max z
    exp: float  # exp(z − max z)
    prob: float  # exp / total


@dataclass(frozen=True)
class SoftmaxSteps:
    """The softmax of a step's top tokens, with the normaliser over the whole vocabulary."""

    rows: tuple[SoftmaxRow, ...]
    max_logit: float
    total: float  # Σ exp(z − max) over every vocabulary entry
    vocab: int
    top_share: float  # how much of the total the rows shown hold


def softmax_steps(step: StepRecord, n: int = 5) -> SoftmaxSteps:
    """Softmax of the recorded raw logits, written out for the top ``n`` tokens."""
    logits = np.asarray(step.logits, np.float64)  # (vocab,)
    top = float(logits.max())
    exps = np.exp(logits - top)  # (vocab,)
    total = float(exps.sum())
    rows = []
    for i in range(min(n, len(step.top_ids))):
        tid = int(step.top_ids[i])
        z = float(logits[tid])
        e = float(exps[tid])
        rows.append(SoftmaxRow(tid, step.top_texts[i], z, z - top, e, e / total))
    share = sum(r.exp for r in rows) / total
    return SoftmaxSteps(tuple(rows), top, total, int(logits.shape[0]), share)


@dataclass(frozen=True)
class StageProb:
    """A token's probability after one sampling stage, and how many tokens that stage kept."""

    stage: str
    prob: float
    kept: int


@dataclass(frozen=True)
class Draw:
    """The token a sampler with ``params`` would draw at one step, and its way through stages."""

    token_id: int
    greedy: bool
    seed: int | None
    stages: tuple[StageProb, ...]  # raw first


def draw_at(step: StepRecord, params: SamplingParams) -> Draw:
    """What ``params`` (its seed included) would draw at ``step`` of a run started afresh.

    The engine makes one generator per run from the seed and draws once per step; a draw
    (``torch.multinomial`` of one sample) consumes the same random numbers whatever the
    probabilities, so the generator is advanced by ``step.index`` draws before this one
    (:func:`generator_at`). A run made with ``params`` draws exactly the recorded token (tested).
    """

    from llm_lens.core.sampling import choose

    stages = staged(step, params)
    generator = None
    if not params.is_greedy:
        generator = generator_at(params, int(np.asarray(step.logits).shape[-1]), step.index)
    token = choose(stages[-1], params, generator)
    probs = tuple(
        StageProb(s.name, float(s.probs[0, token]), int((s.probs[0] > 0).sum())) for s in stages
    )
    return Draw(token, params.is_greedy, params.seed, probs)


def recorded_probs(step: StepRecord, params: SamplingParams, token: int) -> list[StageProb] | None:
    """``token``'s way through the stages as the loop recorded them (``step.stages``: each
    stage's top-n and kept count), with no re-staging of the logits. ``params`` must be the
    settings the run used. None when the recorded stages are not ``params``'s, or when
    ``token`` is missing from a stage's top-n while that stage kept more tokens than it
    recorded (its probability there is unknown): re-stage then."""
    if [s.name for s in step.stages] != ["raw", *params.active_stages()]:
        return None
    out = []
    for stage in step.stages:
        hits = np.flatnonzero(stage.top_ids == token)
        if not hits.size and stage.kept > len(stage.top_ids):
            return None
        prob = float(stage.top_probs[hits[0]]) if hits.size else 0.0
        out.append(StageProb(stage.name, prob, stage.kept))
    return out


def recorded_draw(step: StepRecord, params: SamplingParams) -> Draw | None:
    """:func:`draw_at` for the run's own settings, from its records: greedy or seeded, the
    replay draws the recorded token (tested), so the draw is known without staging 49,152
    logits on the GUI thread when a run ends. None with a fresh seed (each draw differs) or
    when :func:`recorded_probs` is."""
    if params.seed is None and not params.is_greedy:
        return None
    probs = recorded_probs(step, params, step.token.id)
    if probs is None:
        return None
    return Draw(step.token.id, params.is_greedy, params.seed, tuple(probs))


_ADVANCED: dict[tuple[int, int], tuple[int, Any]] = {}  # (seed, vocab) -> (draws, state)
_CHUNK = 1 << 20  # random numbers generated at once while advancing


def generator_at(params: SamplingParams, vocab: int, draws: int) -> Any:
    """A CPU generator seeded as a run with ``params`` seeds its own, after ``draws`` draws of
    one token from ``vocab``.

    ``torch.multinomial`` of one sample takes one exponential per token, each from 64 random
    bits; generating the same count of 64-bit integers leaves the generator in the same state
    at a quarter of the cost (checked draw for draw against a seeded run in
    ``tests/core/test_arithmetic.py``). The state after the last call is kept, so following a
    run or scrubbing forward advances only by the new steps.
    """
    import torch

    generator = make_generator(params, "cpu")
    if params.seed is None:
        return generator  # a fresh seed: nothing to replay
    key = (int(params.seed), int(vocab))
    done, state = _ADVANCED.get(key, (0, None))
    if state is not None and done <= draws:
        generator.set_state(state)
    else:
        done = 0
    left = (draws - done) * vocab
    while left > 0:
        torch.empty(min(left, _CHUNK), dtype=torch.int64).random_(generator=generator)
        left -= _CHUNK
    _ADVANCED[key] = (draws, generator.get_state())
    return generator


@dataclass(frozen=True)
class HeadPattern:
    """How much weight one head's rows give the first token and the previous token."""

    sink: float  # mean over rows 1… of the weight on key 0
    previous: float  # mean over rows 1… of the weight on key q − 1 (rows 2…, so not key 0)
    rows: int

    @property
    def is_sink(self) -> bool:
        return self.rows > 0 and self.sink >= SINK_SHARE

    @property
    def is_previous_token(self) -> bool:
        return self.rows > 0 and self.previous >= PREVIOUS_SHARE

    def names(self) -> list[str]:
        """Phenomena present in these numbers, in words with the numbers."""
        out = []
        if self.is_sink:
            out.append(
                f"attention sink: its rows put {self.sink:.0%} of their weight on the first "
                "token on average"
            )
        if self.is_previous_token:
            out.append(
                f"previous-token head: its rows put {self.previous:.0%} of their weight on "
                "the token just before on average"
            )
        return out


def head_pattern(weights: Any) -> HeadPattern:
    """Sink and previous-token shares of a causal (q, k) map of one head (unpooled)."""
    w = np.asarray(weights)
    n = min(w.shape[0], w.shape[1]) if w.ndim == 2 else 0
    if n < 3:
        return HeadPattern(0.0, 0.0, 0)
    sink = float(np.nanmean(w[1:n, 0].astype(np.float64)))
    q = np.arange(2, n)
    previous = float(np.nanmean(w[q, q - 1].astype(np.float64)))
    return HeadPattern(sink, previous, n - 1)


def strongest_key(row: Any) -> tuple[int, float]:
    """(key index, weight) of the largest weight in one attention row."""
    r = np.nan_to_num(np.asarray(row, np.float64), nan=-1.0)
    k = int(np.argmax(r))
    return k, float(r[k])


def top_links(
    weights: Any, limit: int, query: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The ``limit`` strongest (query, key, weight) cells of a causal map (of row ``query``
    alone when given), weakest first, and how many non-zero cells were left out: what a line
    view can afford to draw.

    Cells above the diagonal never count. Only cells at least as strong as the ``limit``-th
    largest row maximum can be among the strongest (``limit`` rows each hold a cell that
    strong), so at a thousand tokens the search looks at a few thousand cells, not half a
    million; the result is the same.
    """
    w = np.asarray(weights)
    if np.isnan(w).any():
        w = np.nan_to_num(w, nan=0.0)
    if query is not None:
        k = np.flatnonzero(w[query, : query + 1] > 0)
        q = np.full(k.size, query, np.int64)
        total = int(k.size)
    else:
        if np.triu(w, 1).any():
            w = np.tril(w)
        floor = float(np.partition(w.max(axis=1), -limit)[-limit]) if len(w) > limit else 0.0
        cells = np.flatnonzero(w.ravel() >= floor if floor > 0 else w.ravel() > 0)
        q, k = np.divmod(cells, w.shape[1])
        total = int(np.count_nonzero(w > 0))
    values = np.asarray(w[q, k], np.float64)
    if values.size > limit:
        keep = np.argpartition(values, -limit)[-limit:]
        q, k, values = q[keep], k[keep], values[keep]
    order = np.argsort(values, kind="stable")  # weakest first: the strongest are drawn on top
    return q[order], k[order], values[order], total - int(values.size)
