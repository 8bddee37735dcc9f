"""Sampling settings and stages, using transformers' own logits processors in generate()'s order.

Each stage's distribution is kept so a pane can show what repetition penalty, temperature,
top-k, top-p and min-p each did to this very step, and how much probability mass each removed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from llm_lens.core.errors import SamplingError
from llm_lens.core.records import StageSummary, frozen

STAGE_ORDER = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")
# Below these, logits divided by the setting overflow float32 to ±inf and the distribution is NaN.
MIN_TEMPERATURE = 1e-6
PENALTY_RANGE = (1e-6, 1e6)
MAX_SEED = 2**64 - 1  # torch.Generator.manual_seed takes an unsigned 64-bit number
MAX_TOP_K = 2**31 - 1


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen. ``temperature == 0`` or ``greedy`` means argmax.

    Neutral values switch a stage off: repetition_penalty 1, temperature 1, top_k 0, top_p 1,
    min_p 0. ``seed`` None draws from a fresh generator (not reproducible).
    """

    temperature: float = 0.7
    top_k: int = 0
    top_p: float = 0.95
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = 0
    greedy: bool = False

    def __post_init__(self) -> None:
        self.validate()

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature == 0

    def validate(self) -> None:
        """Raise :class:`SamplingError` with a plain message for an out-of-range setting."""
        t, penalty, low, high = self.temperature, self.repetition_penalty, *PENALTY_RANGE
        checks = [
            (math.isfinite(t) and t >= 0, "temperature must be ≥ 0"),
            (t == 0 or t >= MIN_TEMPERATURE, f"temperature must be 0 or ≥ {MIN_TEMPERATURE:g}"),
            (0 <= self.top_k <= MAX_TOP_K, "top-k must be ≥ 0 (0 switches it off)"),
            (0 < self.top_p <= 1, "top-p must be in (0, 1]"),
            (0 <= self.min_p < 1, "min-p must be in [0, 1)"),
            (penalty > 0, "repetition penalty must be > 0 (1 switches it off)"),
            (low <= penalty <= high, f"repetition penalty must be in [{low:g}, {high:g}]"),
            (self.seed is None or 0 <= self.seed <= MAX_SEED, "seed must be in [0, 2**64 - 1]"),
        ]
        for ok, message in checks:
            if not ok:
                raise SamplingError(f"{message}; got {self._describe()}")

    def with_(self, **changes: Any) -> SamplingParams:
        return replace(self, **changes)

    def _describe(self) -> str:
        return (
            f"temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p}, "
            f"min_p={self.min_p}, repetition_penalty={self.repetition_penalty}, seed={self.seed}"
        )

    def active_stages(self) -> list[str]:
        """Stages that change the distribution, in generate()'s order."""
        stages = ["repetition_penalty"] if self.repetition_penalty != 1.0 else []
        if self.is_greedy:
            return stages
        on = {
            "temperature": self.temperature != 1.0,
            "top_k": self.top_k > 0,
            "top_p": self.top_p < 1.0,
            "min_p": self.min_p > 0.0,
        }
        return stages + [s for s in STAGE_ORDER[1:] if on[s]]


def entropy(p: Any) -> float:
    """Shannon entropy in nats of a stage's probability vector (zeros contribute nothing), as
    :func:`llm_lens.core.logits.entropy` computes it for the raw distribution; its own here, as
    the stages do not import each other. torch is imported on first use: the CLI checks sampling
    settings before torch is loaded."""
    import torch

    p = p.double()
    logp = torch.where(p > 0, p.log(), torch.zeros_like(p))
    return float(-(p * logp).sum())


GREEDY = SamplingParams(temperature=0.0, top_p=1.0, seed=None, greedy=True)


def make_processor(stage: str, params: SamplingParams) -> Any:
    """The transformers logits processor that implements ``stage``."""
    from transformers import (
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    factories: dict[str, Any] = {
        "repetition_penalty": lambda: RepetitionPenaltyLogitsProcessor(params.repetition_penalty),
        "temperature": lambda: TemperatureLogitsWarper(params.temperature),
        "top_k": lambda: TopKLogitsWarper(top_k=params.top_k),
        "top_p": lambda: TopPLogitsWarper(top_p=params.top_p),
        "min_p": lambda: MinPLogitsWarper(min_p=params.min_p),
    }
    return factories[stage]()


@dataclass
class StageResult:
    """One stage's scores (torch, (1, vocab)) and the mass it removed from the previous stage."""

    name: str
    scores: Any
    probs: Any
    removed_mass: float


def run_stages(logits: Any, context_ids: Any, params: SamplingParams) -> list[StageResult]:
    """Apply every active processor in order to raw ``logits`` ((vocab,) or (1, vocab) tensor).

    ``context_ids`` are the tokens already read (for the repetition penalty), shape (1, seq).
    The first result is ``raw``.
    """
    import torch

    scores = logits.reshape(1, -1).float()
    ids = torch.as_tensor(context_ids, device=scores.device).reshape(1, -1)
    probs = torch.softmax(scores, dim=-1)
    results = [StageResult("raw", scores, probs, 0.0)]
    for name in params.active_stages():
        new_scores = make_processor(name, params)(ids, scores.clone())
        new_probs = torch.softmax(new_scores, dim=-1)
        removed = float(probs[torch.isneginf(new_scores)].sum()) if name not in ("raw",) else 0.0
        results.append(StageResult(name, new_scores, new_probs, removed))
        scores, probs = new_scores, new_probs
    return results


def choose(final: StageResult, params: SamplingParams, generator: Any) -> int:
    """argmax for greedy, else one multinomial draw, exactly as generate() does."""
    import torch

    if params.is_greedy:
        return int(torch.argmax(final.scores, dim=-1)[0])
    probs = final.probs
    if not bool(torch.isfinite(probs).all()):
        raise SamplingError(f"these settings make the distribution NaN; {params._describe()}")
    if generator is not None and probs.device != generator.device:
        probs = probs.to(generator.device)  # a CUDA run draws on the host: same seed, same draws
    return int(torch.multinomial(probs, num_samples=1, generator=generator)[0, 0])


def make_generator(params: SamplingParams, device: Any = "cpu") -> Any:
    import torch

    gen = torch.Generator(device=device)
    if params.seed is None:
        gen.seed()
    else:
        gen.manual_seed(params.seed)
    return gen


def summarize(stages: Sequence[StageResult], top_n: int) -> tuple[StageSummary, ...]:
    """Reduce each stage to its top-n tokens, kept count and entropy (numpy, read-only)."""
    import torch

    out = []
    for stage in stages:
        p = stage.probs[0]
        k = min(top_n, p.shape[0])
        top_p, top_i = torch.topk(p, k)
        out.append(
            StageSummary(
                name=stage.name,
                removed_mass=stage.removed_mass,
                kept=int((p > 0).sum()),
                entropy=entropy(p),
                top_ids=frozen(top_i.cpu().numpy(), np.int64),
                top_probs=frozen(top_p.float().cpu().numpy(), np.float32),
            )
        )
    return tuple(out)


def stages_of(
    logits: np.ndarray, context_ids: np.ndarray, params: SamplingParams
) -> list[StageResult]:
    """Re-run the stages of a recorded step (numpy logits and context) under ``params``,
    without the model; the last result is the distribution a draw would use."""
    import torch

    logits_t = torch.from_numpy(np.array(logits, dtype=np.float32))  # records are read-only
    return run_stages(logits_t, torch.from_numpy(np.array(context_ids, dtype=np.int64)), params)


_STAGED: dict[tuple[int, SamplingParams], tuple[Any, list[StageResult]]] = {}
STAGED_KEPT = 8  # (step, settings) stagings kept: a pane, its card and the Logits card share one


def staged(step: Any, params: SamplingParams) -> list[StageResult]:
    """:func:`stages_of` a recorded step (``.logits``, ``.context_ids``), computed once for
    the few latest (step, settings). A served step without logits is staged over the
    alternatives the server returned (indices into ``top_ids``). The Sampling pane, its card
    and the Logits card each asked for the same 49,152-logit staging after a run (10–16 ms
    of torch each on the GUI thread). The results are shared: read them, do not change them."""
    key = (id(step), params)
    hit = _STAGED.get(key)
    if hit is not None and hit[0] is step:
        return hit[1]
    logits, context = step.logits, step.context_ids
    if logits.size == 0:  # a served step: its alternatives alone, in their order (approximate)
        logits, context = step.top_logits, context[:0]
    stages = stages_of(logits, context, params)
    _STAGED[key] = (step, stages)
    while len(_STAGED) > STAGED_KEPT:
        _STAGED.pop(next(iter(_STAGED)))
    return stages


def restage(
    logits: np.ndarray, context_ids: np.ndarray, params: SamplingParams, top_n: int = 20
) -> tuple[StageSummary, ...]:
    """Re-run the stages of a recorded step under new settings, summarised to the top ``top_n``."""
    return summarize(stages_of(logits, context_ids, params), top_n)


MIN_CONFIGS, MAX_CONFIGS = 2, 4  # sampler configurations compared side by side
MAX_SAMPLES = 16  # runs of one configuration over seeds


def check_configs(n: int) -> None:
    """Raise :class:`SamplingError` unless ``n`` configurations can be compared side by side
    (the one rule for ``llm-lens compare``, :func:`llm_lens.core.runs.compare.compare` and the
    Compare view)."""
    if n > MAX_CONFIGS:
        raise SamplingError(f"at most four configurations can be compared; got {n}")
    if n < MIN_CONFIGS:
        raise SamplingError(f"a comparison needs at least two configurations; got {n}")
