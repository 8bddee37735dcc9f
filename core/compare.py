"""Side-by-side runs that share one prefill, token branching, and prompt-prefix reuse.

:func:`compare` reads the prompt once and forks its KV cache for every sampling configuration,
so each column samples from the very same step-0 logits; with the same seeds the tokens equal
those of separate :meth:`~core.engine.Engine.start` runs. :func:`branch` continues a finished run
from one of its steps with another token, cropping a copy of its cache instead of recomputing it.
:class:`PrefixCache` lets an edited prompt prefill only what changed.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core import sampling
from core.engine import Engine, Run, RunConfig, RunStart, copy_cache
from core.errors import PromptError, SamplingError
from core.records import PromptTokens, StepRecord, TokenInfo
from core.sampling import SamplingParams

MAX_CONFIGS = 4
MAX_SAMPLES = 16
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
    logits = torch.tensor(np.asarray(step.logits))  # a copy: records are read-only
    stages = sampling.run_stages(logits, torch.tensor(np.asarray(step.context_ids)), params)
    return stages[-1].probs[0].double().cpu().numpy()  # type: ignore[no-any-return]


# --- shared prefill ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnStats:
    """One column of a comparison. Log-probs are under the model's raw distribution."""

    length: int
    tokens_per_s: float
    mean_logprob: float
    perplexity: float  # exp(−mean logprob)
    finish_reason: str


@dataclass
class Comparison:
    """Runs forked from one prefill. Metrics are computed from the runs' steps when asked.

    ``kl_per_step`` and ``overlap_per_step`` cover the steps every run reached while all contexts
    were still identical: up to and including :attr:`divergence_step` (after it the runs read
    different tokens, so their distributions answer different questions).
    """

    prompt: PromptTokens
    runs: list[Run]
    shared_prefill_ms: float

    @property
    def params(self) -> list[SamplingParams]:
        return [r.params for r in self.runs]

    @property
    def prefill_saved_ms(self) -> float:
        return self.shared_prefill_ms * (len(self.runs) - 1)

    def steps(self) -> Iterator[tuple[int, StepRecord]]:
        """Advance the runs round-robin, yielding (column, record) until every run has ended."""
        with torch.inference_mode():  # outermost, so the runs' own enter/exit cannot interleave
            live = {i: iter(run) for i, run in enumerate(self.runs)}
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


def column_stats(run: Run) -> ColumnStats:
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
    if len(configs) > MAX_CONFIGS:
        raise SamplingError(f"at most four configurations can be compared; got {len(configs)}")
    if len(configs) < 2:
        raise SamplingError(f"a comparison needs at least two configurations; got {len(configs)}")
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


# --- branching -----------------------------------------------------------------------------------


def crop_to(cache: Any, length: int) -> None:
    """Cut a cache back to its first ``length`` tokens (``crop`` takes how many to remove)."""
    remove = int(cache.get_seq_length()) - length
    if remove < 0:
        raise PromptError(f"the cache holds {length - remove} tokens, fewer than {length}")
    if remove:
        cache.crop(-remove)


def extend_prompt(engine: Engine, prompt: PromptTokens, extra: Sequence[int]) -> PromptTokens:
    """``prompt`` followed by ``extra`` tokens (generated ones: no character offsets)."""
    tokens = tuple(engine.texts.info(int(i)) for i in extra)
    rendered = prompt.rendered + "".join(t.text for t in tokens)
    return PromptTokens(prompt.text, rendered, prompt.chat, prompt.tokens + tokens)


def branch(
    engine: Engine,
    run: Run,
    step_index: int,
    token_id: int,
    params: SamplingParams,
    run_config: RunConfig,
    cancel: threading.Event | None = None,
) -> Run:
    """A run continuing ``run`` as if step ``step_index`` had chosen ``token_id``.

    The new run's prompt is the old prompt, the tokens generated before that step and the forced
    token; it starts from a cropped copy of ``run``'s cache (``run`` stays usable), so its step 0
    reads only the forced token. ``run_config.max_new_tokens`` counts tokens after the forced one.
    Nothing is computed until the returned run is iterated.
    """
    if not 0 <= step_index < len(run.steps):
        raise PromptError(f"branch step {step_index} is outside the run's {len(run.steps)} steps")
    if not 0 <= token_id < engine.info.vocab_size:
        raise PromptError(f"token id {token_id} is outside the vocabulary")
    if run.cache is None:
        raise PromptError("the run has no cache to branch from: run it first")
    prefix = [int(i) for i in run.steps[step_index].context_ids]  # prompt + generated[:step]
    cache = copy_cache(run.cache)
    crop_to(cache, len(prefix))
    prompt = extend_prompt(engine, run.prompt, [*prefix[len(run.prompt) :], token_id])
    return engine.start_from(prompt, params, RunStart(cache), run_config, cancel)


@dataclass(frozen=True)
class Alternative:
    """A token the branch UI offers at a step."""

    token_id: int
    text: str
    prob: float  # raw distribution
    final_prob: float | None  # after the last sampling stage; None when the record cannot tell
    chosen: bool


def alternatives(
    step: StepRecord, k: int, params: SamplingParams | None = None
) -> list[Alternative]:
    """The raw top-k tokens of ``step`` (k ≤ the record's top-N) with their final probabilities.

    With ``params`` the final distribution is recomputed exactly; without, it is read from the
    recorded final-stage summary (None for a token outside it that may still have mass).
    """
    k = max(0, min(k, len(step.top_ids)))
    exact = final_probs(step, params) if params is not None else None
    last = step.stages[-1]
    listed = {int(i): float(p) for i, p in zip(last.top_ids, last.top_probs, strict=True)}
    complete = last.kept <= len(last.top_ids)  # every token with mass is in the summary
    out = []
    for i in range(k):
        tid = int(step.top_ids[i])
        final = listed.get(tid, 0.0 if complete else None)
        if exact is not None:
            final = float(exact[tid])
        out.append(
            Alternative(
                tid, step.top_texts[i], float(step.top_probs[i]), final, tid == step.token.id
            )
        )
    return out


@dataclass(frozen=True)
class BranchNode:
    """One run in a branch tree, for a tree view."""

    run_id: int
    parent_run_id: int | None
    branch_step: int | None  # the parent's step whose token was replaced
    forced_token: TokenInfo | None
    depth: int
    offset: int  # generated tokens (from the root's prompt) before this run's step 0
    cumulative_logprob: float  # raw log-prob of every generated token from the root to the end
    text: str  # this run's own output


@dataclass
class _Edge:
    run: Run
    parent: Run | None = None
    step: int | None = None
    token: int | None = None
    children: list[int] = field(default_factory=list)


class BranchTree:
    """A root run and the branches grown from it (and from them). Nodes are read live."""

    def __init__(self, root: Run) -> None:
        self.root = root.run_id
        self._edges: dict[int, _Edge] = {root.run_id: _Edge(root)}

    def add(self, parent: Run, step_index: int, token_id: int, child: Run) -> None:
        if parent.run_id not in self._edges:
            raise PromptError(f"run {parent.run_id} is not in this tree")
        self._edges[child.run_id] = _Edge(child, parent, step_index, token_id)
        self._edges[parent.run_id].children.append(child.run_id)

    def branch(
        self,
        engine: Engine,
        parent: Run,
        step_index: int,
        token_id: int,
        params: SamplingParams,
        run_config: RunConfig,
    ) -> Run:
        """:func:`branch` and :meth:`add` in one call; the child still has to be iterated."""
        child = branch(engine, parent, step_index, token_id, params, run_config)
        self.add(parent, step_index, token_id, child)
        return child

    def _base(self, run_id: int) -> tuple[float, int]:
        """(log-prob of every generated token before the run's step 0, how many there are)."""
        edge = self._edges[run_id]
        if edge.parent is None or edge.step is None or edge.token is None:
            return 0.0, 0
        logp, offset = self._base(edge.parent.run_id)
        before = sum(s.logprob for s in edge.parent.steps[: edge.step])
        logits = np.asarray(edge.parent.steps[edge.step].logits, np.float64)
        forced = logits[edge.token] - np.logaddexp.reduce(logits)
        return logp + before + float(forced), offset + edge.step + 1

    def nodes(self) -> list[BranchNode]:
        """Every run, depth first, children in the order they were added."""
        out: list[BranchNode] = []
        stack = [(self.root, 0)]
        while stack:
            run_id, depth = stack.pop()
            edge = self._edges[run_id]
            logp, offset = self._base(run_id)
            token = None if edge.token is None else edge.run.engine.texts.info(edge.token)
            out.append(
                BranchNode(
                    run_id,
                    None if edge.parent is None else edge.parent.run_id,
                    edge.step,
                    token,
                    depth,
                    offset,
                    logp + sum(s.logprob for s in edge.run.steps),
                    edge.run.output_text(),
                )
            )
            stack.extend((c, depth + 1) for c in reversed(edge.children))
        return out


# --- prefix reuse --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefixReuse:
    """How much of a prompt came from the previous run's cache."""

    tokens_reused: int
    prompt_tokens: int

    @property
    def suffix_tokens(self) -> int:
        return self.prompt_tokens - self.tokens_reused


def ttft_saved_ms(full: Run, reused: Run) -> float:
    """Measured: the full prompt's prefill time minus the suffix-only prefill time."""
    return full.steps[0].timing.forward_ms - reused.steps[0].timing.forward_ms


class PrefixCache:
    """The last finished run's context ids and KV cache, so an edited prompt reads only its new
    suffix. The stored cache is never extended: :meth:`reuse` hands out cropped copies."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.cache: Any = None

    def remember(self, run: Run) -> None:
        """Keep a finished run's cache: it holds the prompt and every generated token but the
        last (which was chosen, never read)."""
        if not run.steps or run.cache is None:
            return
        self.ids = [int(i) for i in run.steps[-1].context_ids]
        self.cache = run.cache

    def reuse(self, prompt_ids: Sequence[int]) -> tuple[int, Any]:
        """(longest common prefix, cropped cache copy or None). At least one token is left to
        read, since the prefill's logits are those of the prompt's last token."""
        n = 0
        limit = min(len(self.ids), len(prompt_ids) - 1)
        while n < limit and self.ids[n] == prompt_ids[n]:
            n += 1
        if n == 0 or self.cache is None:
            return 0, None
        cache = copy_cache(self.cache)
        crop_to(cache, n)
        return n, cache

    def start(
        self,
        engine: Engine,
        prompt: PromptTokens,
        params: SamplingParams,
        run_config: RunConfig,
        cancel: threading.Event | None = None,
    ) -> tuple[Run, PrefixReuse]:
        """A run of ``prompt`` that prefills only what the cache does not already hold."""
        n, cache = self.reuse(prompt.ids)
        start = RunStart(engine.new_cache() if cache is None else cache)
        run = engine.start_from(prompt, params, start, run_config, cancel)
        return run, PrefixReuse(n, len(prompt))
