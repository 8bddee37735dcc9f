"""Branching: continue a run from any step with another token (or go on from its end),
cropping a copy of its KV cache instead of recomputing it; branch trees and their paths.
Prefix reuse across runs is :mod:`core.runs.prefix`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llm_lens.core.errors import PromptError
from llm_lens.core.loop.engine import Engine, Run, RunConfig, RunStart, copy_cache
from llm_lens.core.records import (
    PrefillCapture,
    PromptTokens,
    RunSummary,
    StepRecord,
    TokenInfo,
)
from llm_lens.core.runs.compare import final_probs
from llm_lens.core.sampling import SamplingParams
from llm_lens.core.tokens import bytes_text

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
    return PromptTokens(
        prompt.text, rendered, prompt.chat, prompt.tokens + tokens, prompt.parse_special
    )


def branch(
    engine: Engine,
    run: Run,
    step_index: int,
    token_id: int,
    params: SamplingParams,
    run_config: RunConfig,
    cancel: threading.Event | None = None,
) -> Run:
    """A run continuing ``run`` as if step ``step_index`` had chosen ``token_id`` (under
    ``run``'s interventions, if any).

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
    if not engine.feeds_whole:  # a model fed the whole sequence re-reads it (start_from)
        crop_to(cache, len(prefix))
    prompt = extend_prompt(engine, run.prompt, [*prefix[len(run.prompt) :], token_id])
    child = engine.start_from(prompt, params, RunStart(cache), run_config, cancel)
    if run.patcher is not None:  # the cache was made under them: the branch keeps them
        child.patcher = run.patcher.carried()
    return child


def continue_run(
    engine: Engine,
    run: Run,
    run_config: RunConfig,
    cancel: threading.Event | None = None,
) -> Run:
    """A run going on where ``run`` stopped, with ``run``'s sampler settings.

    Its prompt is ``run``'s whole context; it starts from a copy of ``run``'s cache and draws
    from a copy of ``run``'s generator, so its tokens are exactly those a longer run with the
    same settings would have gone on to generate (``run`` itself stays as it is). Nothing is
    computed until the returned run is iterated; its step 0 reads only ``run``'s last token.
    """
    problem = continue_problem(len(run.steps), run.finish_reason, engine.info.context_length)
    if problem:
        raise PromptError(problem)
    last = run.steps[-1]
    child = branch(engine, run, len(run.steps) - 1, last.token.id, run.params, run_config, cancel)
    if run.generator is not None:
        child.generator = copy_generator(run.generator)
    return child


def continue_problem(steps: int, finish_reason: str | None, context_length: int) -> str:
    """Why a run of ``steps`` steps that ended with ``finish_reason`` cannot go on ('' if it
    can): the one rule for the window's Continue and for :func:`continue_run`."""
    if not steps:
        return "the run has no steps to continue from: run it first"
    if finish_reason == "eos":
        return "the run ended with its end-of-sequence token: branch from an earlier step to go on"
    if finish_reason == "context":
        return f"the run filled the model's context ({context_length} tokens): it cannot go on"
    return ""


def copy_generator(generator: Any) -> Any:
    """A torch generator in the same state as ``generator`` (drawing from one leaves the other)."""
    import torch

    copy = torch.Generator(device=generator.device)
    copy.set_state(generator.get_state())
    return copy


# --- paths: a branch the way it reads ------------------------------------------------------------


def forced_record(engine: Engine, step: StepRecord, token_id: int, run_id: int) -> StepRecord:
    """``step`` as if it had chosen ``token_id``: same distribution, another token."""
    logits = np.asarray(step.logits, np.float64)
    logprob = float(logits[token_id] - np.logaddexp.reduce(logits))
    return dataclasses.replace(
        step,
        run_id=run_id,
        token=engine.texts.info(token_id),
        prob=float(np.exp(logprob)),
        logprob=logprob,
        rank=int((step.logits > step.logits[token_id]).sum()),
        finish_reason=None,
    )


@dataclass
class PathRun:
    """A run of a branch tree as it reads: the root's prompt and prefill, then every step from
    the root on (the steps before the branch point, the forced token as the step it replaced,
    then the branch's own steps, re-indexed). Run-like, so analyses and sessions take it."""

    run_id: int
    engine: Engine
    prompt: PromptTokens
    params: SamplingParams
    prefill: PrefillCapture | None
    run: Run  # the core run whose own steps end this path
    offset: int  # path steps before ``run``'s step 0
    steps: list[StepRecord] = field(default_factory=list)
    finish_reason: str | None = None

    @classmethod
    def root(cls, run: Run) -> PathRun:
        path = cls(run.run_id, run.engine, run.prompt, run.params, run.prefill, run, 0)
        path.steps, path.finish_reason = list(run.steps), run.finish_reason
        return path

    @classmethod
    def grown(
        cls, shown: PathRun, owner: PathRun, local: int, token_id: int, child: Run
    ) -> PathRun:
        """The path of ``child``, a branch of ``owner``'s run at its step ``local`` with
        ``token_id`` (``shown``: the path it was asked from, for the prompt and prefill)."""
        at = owner.offset + local
        run_id = child.run_id
        path = cls(run_id, child.engine, shown.prompt, child.params, shown.prefill, child, at + 1)
        path.steps = [dataclasses.replace(s, run_id=run_id) for s in owner.steps[:at]]
        path.steps.append(forced_record(child.engine, owner.steps[at], token_id, run_id))
        return path

    def add(self, record: StepRecord) -> StepRecord:
        """Append a step of ``run`` (re-indexed along the path); returns it as appended."""
        record = dataclasses.replace(record, index=self.offset + record.index)
        self.steps.append(record)
        return record

    @property
    def cache(self) -> Any:
        return self.run.cache

    @property
    def generator(self) -> Any:
        return self.run.generator

    @property
    def interventions(self) -> tuple[Any, ...]:
        """The interventions the path's runs were made under (a branch keeps its root's)."""
        return tuple(self.run.interventions)

    def summary(self) -> RunSummary:
        summary = RunSummary.of(self.run_id, self.prompt, self.steps, self.finish_reason)
        if self.interventions:
            summary.extra["interventions"] = [i.to_dict() for i in self.interventions]
        return summary


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
    continued: bool = False  # the forced token is the one the parent chose: a continuation
    label: str = ""  # a saved run's name (sessions)
    prompt: str = ""  # a root's prompt, as typed


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
            continued = (
                edge.parent is not None
                and edge.step is not None
                and edge.parent.steps[edge.step].token.id == edge.token
            )
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
                    continued,
                    prompt="" if edge.parent is not None else edge.run.prompt.text,
                )
            )
            stack.extend((c, depth + 1) for c in reversed(edge.children))
        return out


def session_nodes(runs: Sequence[Any]) -> list[BranchNode]:
    """The branch tree of a session's runs (``core.sessions.format.SessionRun``), depth first.

    A saved branch holds its whole path (the root's steps before the branch point, then its
    own), so its cumulative log-prob is the sum over its steps; ``parent`` names the run and
    step it branched from. Runs whose parent is not in the list are roots.
    """
    by_id = {r.run_id: r for r in runs}
    children: dict[int | None, list[Any]] = {}
    for r in runs:
        parent = r.parent[0] if r.parent is not None and r.parent[0] in by_id else None
        children.setdefault(parent, []).append(r)
    out: list[BranchNode] = []
    stack = [(r, 0) for r in reversed(children.get(None, []))]
    seen: set[int] = set()
    while stack:
        run, depth = stack.pop()
        if run.run_id in seen:  # a malformed file's cycle or repeated id
            continue
        seen.add(run.run_id)
        parent, step = (None, None) if run.parent is None else run.parent
        parent_run = by_id.get(parent) if parent is not None else None
        forced = continued = None
        offset = 0
        if parent_run is not None and step is not None and 0 <= step < len(run.steps):
            forced, offset = run.steps[step].token, step + 1
            chosen = parent_run.steps[step].token if step < len(parent_run.steps) else None
            by_text = forced.id < 0  # a server that named texts only
            continued = chosen is not None and (
                chosen.text == forced.text if by_text else chosen.id == forced.id
            )
        own = b"".join(s.token.raw for s in run.steps[offset:] if not s.token.special)
        out.append(
            BranchNode(
                run.run_id,
                parent if parent_run is not None else None,
                step if parent_run is not None else None,
                forced,
                depth,
                offset,
                float(sum(s.logprob for s in run.steps)),
                bytes_text(own),
                bool(continued),
                run.label,
                run.prompt.text if parent_run is None else "",
            )
        )
        stack.extend((c, depth + 1) for c in reversed(children.get(run.run_id, [])))
    return out
