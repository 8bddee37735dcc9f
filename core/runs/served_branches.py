"""The Branches view's job against a server: a branch (or a continuation) of a served run as a
new request on the text so far (:func:`~llm_lens.core.engines.openai.jobs.continuation`), kept
in a tree of the runs branched on that server.

A branch streams like a live run: ``run_started`` (its prompt: the text so far, as the server
tokenizes it), ``step`` …, ``run_finished``, then ``branch_done`` (the branch to show again and
every node of the tree). The run it branched from joins the tree as a root the first time
(``served_root``: that run, to show again). The alternatives a step offers are the ones the
server returned, with no after-sampling probability (the server returns no logits to apply
the sampler to).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llm_lens.core.engines.openai.engine import OpenAIEngine, ServedRun
from llm_lens.core.engines.openai.jobs import continuation
from llm_lens.core.errors import LensError
from llm_lens.core.records import StepRecord, TokenInfo
from llm_lens.core.runs.branching import Alternative, BranchNode
from llm_lens.core.runs.jobs import Item, Job, ShownRun

if TYPE_CHECKING:
    from llm_lens.core.runs.workbench import Workbench


def served_alternatives(step: StepRecord, k: int) -> list[Alternative]:
    """The step's first ``k`` returned alternatives with their probabilities; no
    after-sampling probability (``final_prob`` None)."""
    out = []
    for i in range(min(k, len(step.top_probs))):
        tid, text = int(step.top_ids[i]), step.top_texts[i]
        chosen = tid == step.token.id if tid >= 0 else text == step.token.text
        out.append(Alternative(tid, text, float(step.top_probs[i]), None, chosen))
    return out


def shown_of(run: ServedRun) -> ShownRun:
    """A served run, to show again in the panes (no prefill: a server shows none)."""
    return ShownRun(run.run_id, run.prompt, None, tuple(run.steps), run.summary(), run.params)


@dataclass
class ServedTree:
    """The runs branched on one server, as the tree view's nodes (in the order they came)."""

    nodes: dict[int, BranchNode] = field(default_factory=dict)

    def add_root(self, run: ServedRun) -> bool:
        """Make ``run`` a root unless it is in the tree already; True when it was added."""
        if run.run_id in self.nodes:
            return False
        logprob = sum(s.logprob for s in run.steps)
        self.nodes[run.run_id] = BranchNode(
            run.run_id, None, None, None, 0, 0, logprob, run.output_text(), prompt=run.prompt.text
        )
        return True

    def add_branch(self, parent: ServedRun, step: int, forced: TokenInfo, run: ServedRun,
                   continued: bool) -> None:  # fmt: skip
        """``run`` branched from ``parent`` at its ``step`` with ``forced`` (the cumulative
        log-probability counts the forced token as the parent's step reported it, or 0 where
        the server did not list it)."""
        up = self.nodes[parent.run_id]
        chosen = parent.steps[step]
        forced_lp = chosen.logprob if continued else _listed_logprob(chosen, forced.text)
        before = up.cumulative_logprob - sum(s.logprob for s in parent.steps)
        logprob = before + sum(s.logprob for s in parent.steps[:step]) + forced_lp
        logprob += sum(s.logprob for s in run.steps)
        self.nodes[run.run_id] = BranchNode(
            run.run_id, parent.run_id, step, forced, up.depth + 1, up.offset + step + 1, logprob,
            run.output_text(), continued,
        )  # fmt: skip

    def all(self) -> tuple[BranchNode, ...]:
        return tuple(self.nodes.values())


def _listed_logprob(step: StepRecord, text: str) -> float:
    import math

    for listed, p in zip(step.top_texts, step.top_probs, strict=True):
        if listed == text and p > 0:
            return math.log(float(p))
    return 0.0


_trees: weakref.WeakKeyDictionary[OpenAIEngine, ServedTree] = weakref.WeakKeyDictionary()


def tree_of(engine: OpenAIEngine) -> ServedTree:
    """The branch tree of ``engine``'s runs (a new server opened starts a new one)."""
    return _trees.setdefault(engine, ServedTree())


def served_branch_job(
    shown_id: int, step: int, token_text: str, max_new: int, new_id: int, continued: bool = False
) -> Job:
    """Branch the served run ``shown_id`` at ``step`` with ``token_text`` (``continued``: the
    token it chose there, its last step: the run goes on)."""

    def job(bench: Workbench) -> Iterator[Item]:
        from llm_lens.core.loop.engine import RunConfig

        engine, parent = bench.engine, bench.store.find(shown_id)
        if not isinstance(engine, OpenAIEngine) or not isinstance(parent, ServedRun):
            raise LensError("that run is no longer kept: run it again on the server to branch it")
        tree = tree_of(engine)
        if tree.add_root(parent):
            yield "served_root", (shown_of(parent), tree.all())
        config = RunConfig(max_new_tokens=max_new)
        branch = continuation(parent, step, token_text, config, bench.cancel)
        branch.run_id = new_id
        bench.store.keep(new_id, branch)
        yield "run_started", branch.prompt
        for record in branch:
            yield "step", record
        yield "run_finished", branch.summary()
        forced = TokenInfo(-1, token_text, token_text.encode())
        tree.add_branch(parent, step, forced, branch, continued)
        yield "branch_done", (shown_of(branch), tree.all())

    return job
