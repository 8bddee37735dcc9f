"""The Branches view's job against a server: a branch (or a continuation) of a served run as a
new request on the text so far (:func:`~llm_lens.core.engines.openai.jobs.continuation`), kept
in a tree of the runs branched on that server.

A branch is shown the way it reads, as a local one is: the root's prompt, the steps before the
branch point, the forced token as the step it replaced (that step's distribution, another
choice), then the server's reply. It streams like a live run: ``run_started``, ``step`` …,
``run_finished``, then ``branch_done`` (the path to show again and every node of the tree).
The run it branched from joins the tree as a root the first time (a ``history`` item, as a
live run's). A text-only server's ids, named after its stream, replace the streamed records
(``steps_named``, as a live run's). The server reads the text so far afresh, so its reply
follows its own tokenization of that text. The alternatives a step offers are the ones the
server returned, with no after-sampling probability (the server returns no logits to apply
the sampler to).
"""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from llm_lens.core.engines.openai.engine import OpenAIEngine, ServedRun
from llm_lens.core.engines.openai.jobs import continuation
from llm_lens.core.engines.openai.live import STEPS_NAMED
from llm_lens.core.errors import LensError
from llm_lens.core.records import StepRecord, TokenInfo
from llm_lens.core.runs.branching import Alternative, BranchNode
from llm_lens.core.runs.jobs import Item, Job, ShownRun

if TYPE_CHECKING:
    from llm_lens.core.loop.engine import RunConfig
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


def forced_step(chosen: StepRecord, text: str) -> StepRecord:
    """The step ``chosen`` with ``text`` chosen instead: its probability, log-probability and
    rank as the server listed it (NaN and past the listed ones where it did not)."""
    if text == chosen.token.text:
        return replace(chosen, finish_reason=None)
    listed = [n for n, t in enumerate(chosen.top_texts) if t == text]
    if not listed:
        token = TokenInfo(-1, text, text.encode())
        return replace(chosen, token=token, prob=math.nan, logprob=math.nan,
                       rank=len(chosen.top_texts), finish_reason=None)  # fmt: skip
    n = listed[0]
    prob = float(chosen.top_probs[n])
    token = TokenInfo(int(chosen.top_ids[n]), text, text.encode())
    logprob = math.log(prob) if prob > 0 else -math.inf
    return replace(chosen, token=token, prob=prob, logprob=logprob, rank=n, finish_reason=None)


def placed(record: StepRecord, run_id: int, index: int, prompt_len: int) -> StepRecord:
    """``record`` as step ``index`` of a path from a prompt of ``prompt_len`` tokens."""
    return replace(record, run_id=run_id, index=index, position=prompt_len - 1 + index)


def path_run(parent: ServedRun, step: int, text: str, new_id: int) -> ServedRun:
    """The branch's path so far: the parent's steps before ``step``, then ``text`` forced there
    (a :class:`ServedRun` that is never iterated: a later branch reads its text)."""
    n = len(parent.prompt)
    head = [placed(s, new_id, i, n) for i, s in enumerate(parent.steps[:step])]
    head.append(placed(forced_step(parent.steps[step], text), new_id, step, n))
    return ServedRun(parent.engine, parent.prompt, parent.params, parent.config, parent.cancel,
                     new_id, head)  # fmt: skip


@dataclass
class ServedTree:
    """The runs branched on one server, as the tree view's nodes (in the order they came),
    and each node's run (the root as the server sent it, a branch as its whole path), held
    here so that a save keeps the tree after the shown run changed."""

    nodes: dict[int, BranchNode] = field(default_factory=dict)
    runs: dict[int, ServedRun] = field(default_factory=dict)

    def add_root(self, run: ServedRun) -> bool:
        """Make ``run`` a root unless it is in the tree already; True when it was added."""
        if run.run_id in self.nodes:
            return False
        logprob = sum(s.logprob for s in run.steps)
        self.runs[run.run_id] = run
        self.nodes[run.run_id] = BranchNode(
            run.run_id, None, None, None, 0, 0, logprob, run.output_text(), prompt=run.prompt.text
        )
        return True

    def add_branch(self, parent_id: int, step: int, path: ServedRun, own: str,
                   continued: bool) -> None:  # fmt: skip
        """The path ``path`` branched from run ``parent_id`` at its ``step``; ``own``: the
        server's reply (the cumulative log-probability is over the whole path)."""
        up = self.nodes[parent_id]
        forced = path.steps[step].token
        logprob = sum(s.logprob for s in path.steps)
        self.runs[path.run_id] = path
        self.nodes[path.run_id] = BranchNode(
            path.run_id, parent_id, step, forced, up.depth + 1, step + 1, logprob, own, continued
        )

    def all(self) -> tuple[BranchNode, ...]:
        return tuple(self.nodes.values())

    def saved_runs(self, make: Callable[..., Any]) -> list[Any]:
        """Every node's run as ``make(run, label, parent)`` (a session's run), parents first:
        a branch's ``parent`` is (the run it branched from, its branch step), so a reopened
        session shows this tree without the server
        (:func:`~llm_lens.core.runs.branching.session_nodes`). The server's line of a run that
        stopped on an error goes with it (``extras_json["stop_error"]``)."""
        out = []
        for node in self.nodes.values():
            run, parent, label = self.runs[node.run_id], None, "run"
            if node.parent_run_id is not None and node.branch_step is not None:
                parent = (node.parent_run_id, node.branch_step)
                forced = node.forced_token
                how = "continued" if node.continued or forced is None else f"forced {forced.text!r}"
                label = f"branch at step {node.branch_step}, {how}"
            made = make(run, label, parent)
            if run.stop_error:
                made = replace(made, extras_json={**made.extras_json, "stop_error": run.stop_error})
            out.append(made)
        return out


_trees: weakref.WeakKeyDictionary[OpenAIEngine, ServedTree] = weakref.WeakKeyDictionary()


def tree_of(engine: OpenAIEngine) -> ServedTree:
    """The branch tree of ``engine``'s runs (a new server opened starts a new one)."""
    return _trees.setdefault(engine, ServedTree())


def tree_runs(engine: Any, make: Callable[..., Any]) -> list[Any]:
    """The session runs of ``engine``'s branch tree (:meth:`ServedTree.saved_runs`); none for
    another engine or a server nothing was branched on."""
    tree = _trees.get(engine) if isinstance(engine, OpenAIEngine) else None
    return [] if tree is None else tree.saved_runs(make)


def served_branch_job(
    shown_id: int, step: int, token_text: str, max_new: int, new_id: int, continued: bool = False
) -> Job:
    """Branch the served run ``shown_id`` at path step ``step`` with ``token_text``
    (``continued``: the token it chose at its last step: the run goes on). Nothing is shown
    until the server's first token came: a request refused leaves the shown run as it was."""

    def job(bench: Workbench) -> Iterator[Item]:
        from llm_lens.core.loop.engine import RunConfig

        engine, parent = bench.engine, bench.store.find(shown_id)
        if not isinstance(engine, OpenAIEngine) or not isinstance(parent, ServedRun):
            raise LensError("that run is no longer kept: run it again on the server to branch it")
        tree = tree_of(engine)
        if tree.add_root(parent):
            yield "history", (shown_of(parent), tree.all())
        config = RunConfig(max_new_tokens=max_new)
        branch = continuation(parent, step, token_text, config, bench.cancel)
        branch.run_id = new_id
        replies = iter(branch)
        first = next(replies, None)  # a refusal raises here, before anything is shown
        path = path_run(parent, step, token_text, new_id)
        bench.store.keep(new_id, path)
        yield "run_started", path.prompt
        yield from (("step", s) for s in list(path.steps))
        for record in itertools.chain([first] if first is not None else [], replies):
            path.steps.append(placed(record, new_id, len(path.steps), len(path.prompt)))
            yield "step", path.steps[-1]
        streamed = list(path.steps)
        _finish(path, branch, step)
        if list(map(id, streamed)) != list(map(id, path.steps)):  # ids named after the stream
            yield STEPS_NAMED, tuple(path.steps)
        yield "run_finished", path.summary()
        tree.add_branch(shown_id, step, path, branch.output_text(), continued)
        yield "branch_done", (shown_of(path), tree.all())

    return job


def _finish(path: ServedRun, branch: ServedRun, step: int) -> None:
    """The path ends as the server's reply did (its finish, its line, what it reported), its
    reply's steps as the reply's own ended: with the ids a text-only server's tokenize
    endpoint named after the stream, and the finish reason; the forced token at ``step``
    named there too (once the stream ended: llama-cpp-python answers only between runs)."""
    path.finish_reason, path.stop_error = branch.finish_reason, branch.stop_error
    path.reported, path.sent = branch.reported, branch.sent
    start, n = len(path.steps) - len(branch.steps), len(path.prompt)
    path.steps[start:] = [placed(s, path.run_id, start + i, n) for i, s in enumerate(branch.steps)]
    if path.steps:
        path.steps[-1] = replace(path.steps[-1], finish_reason=branch.finish_reason)
    forced = path.steps[step]
    if forced.token.id < 0 and branch.finish_reason not in ("error", "cancelled"):
        found = path.engine.ids.id_of(forced.token.text)
        if found >= 0:
            path.steps[step] = replace(forced, token=replace(forced.token, id=found))


def grow_path(parent: ServedRun, step: int, token_text: str, config: RunConfig,
              cancel: threading.Event | None, new_id: int) -> ServedRun:  # fmt: skip
    """The branch of ``parent`` at ``step`` forcing ``token_text``, asked of the server and
    read to its end, as a path (the steps before, the forced one, the reply): what the CLI's
    ``trace --branch`` keeps (a refused request raises its line)."""
    branch = continuation(parent, step, token_text, config, cancel)
    path = path_run(parent, step, token_text, new_id)
    for record in branch:
        path.steps.append(placed(record, new_id, len(path.steps), len(path.prompt)))
    _finish(path, branch, step)
    return path
