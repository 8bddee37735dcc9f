"""The runs of an exploration: every finished run is the root of a tree of its branches and
continuations, kept up to a limit of runs and bytes, and saved together as one session.

Used by the window's model thread and usable as it is from a script or the CLI: nothing here
knows of Qt. A :class:`RunStore` holds the runs that can answer analyses (``runs``) and those
kept for showing, branching and saving later (``kept``); a :class:`RunHistory` keeps the trees.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_lens.core.errors import PromptError
from llm_lens.core.loop.engine import Engine, Run, RunConfig
from llm_lens.core.records import StepRecord
from llm_lens.core.runs.branching import BranchNode, BranchTree, PathRun, branch, continue_run
from llm_lens.core.runs.resume import Revived, revive

MAX_ROOTS = 12  # live runs kept in the history (each with its branches); older ones are let go
MAX_HISTORY_BYTES = 1 << 30  # and no more than this held by them (a 4,000-token prompt's
# hidden states alone are 290 MB); the newest run is always kept


@dataclass
class RunStore:
    """Runs held on the model thread, by run id: ``runs`` answer analyses now, ``kept`` are
    held for showing, branching and saving later (comparison columns, the history's runs)."""

    runs: dict[int, Any] = field(default_factory=dict)
    kept: dict[int, Any] = field(default_factory=dict)

    def keep(self, run_id: int, run: Any) -> None:
        """Make ``run`` answer analyses now, and keep it for later."""
        self.runs[run_id] = run
        self.kept[run_id] = run

    def forget(self, run_ids: Sequence[int]) -> None:
        """Let runs go (they stop answering analyses too)."""
        for run_id in run_ids:
            self.kept.pop(run_id, None)
            self.runs.pop(run_id, None)

    def find(self, run_id: int) -> Any:
        """The run with this id, kept or answering analyses; None when it is gone."""
        return self.kept.get(run_id) or self.runs.get(run_id)

    def clear(self) -> None:
        self.runs.clear()
        self.kept.clear()


def held_bytes(run: Any, steps: Sequence[StepRecord] | None = None) -> int:
    """Bytes a kept run holds: its prefill's hidden states, its steps' arrays, its KV cache."""
    steps = run.steps if steps is None else steps
    total = 0 if run.prefill is None else run.prefill.hidden.nbytes
    for s in steps:
        total += s.logits.nbytes + s.hidden.nbytes + s.attn_update.nbytes + s.attention.nbytes
        total += 0 if s.routing is None else s.routing.nbytes  # mixture-of-experts models
    return total + (steps[-1].kv.bytes_total if steps else 0)


@dataclass
class Growth:
    """A branch or continuation being generated: iterate it for the new path's steps.

    ``path`` already holds the steps before the branch point (and the forced token); each
    record the child run makes is appended to it, re-indexed. When the child ends, the path
    joins the history (unless its tree was let go meanwhile).
    """

    path: PathRun
    child: Run
    revived: Revived | None
    _done: Callable[[PathRun], None]

    def __iter__(self) -> Iterator[StepRecord]:
        for record in self.child:
            yield self.path.add(record)
        self.path.finish_reason = self.child.finish_reason
        self._done(self.path)


class RunHistory:
    """Every finished run as the root of a :class:`~llm_lens.core.runs.branching.BranchTree`
    of its branches and continuations (the oldest roots let go beyond :data:`MAX_ROOTS` or
    :data:`MAX_HISTORY_BYTES`), and the :class:`PathRun` of each run. One thread uses it."""

    def __init__(self) -> None:
        self.trees: dict[int, BranchTree] = {}  # root run id → tree, oldest first
        self.root_of: dict[int, int] = {}  # path id → its tree's root id
        self.paths: dict[int, PathRun] = {}
        self.parent: dict[int, int] = {}
        self.owned: set[int] = set()  # run ids this history put into the store's ``kept``
        self.bytes: dict[int, int] = {}  # root id → bytes its tree holds

    def reset(self, store: RunStore) -> None:
        store.forget(list(self.owned))
        self.__init__()  # type: ignore[misc]

    def holds(self, run_id: int) -> bool:
        return run_id in self.paths

    def nodes(self) -> tuple[BranchNode, ...]:
        """Every run of every tree, oldest tree first, each depth first."""
        return tuple(node for tree in self.trees.values() for node in tree.nodes())

    def add_root(self, store: RunStore, run: Run) -> PathRun:
        """Make a finished run the root of a new tree (and keep it in ``store``)."""
        run_id = run.run_id
        if run_id not in store.kept:  # a live run: the history keeps it from now on
            self.owned.add(run_id)
        self.trees[run_id] = BranchTree(run)
        self.root_of[run_id] = run_id
        self.paths[run_id] = root = PathRun.root(run)
        self.bytes[run_id] = held_bytes(run)
        store.keep(run_id, run)
        self.trim(store)
        return root

    def trim(self, store: RunStore) -> None:
        """Let the oldest trees go while there are too many or they hold too much."""
        while len(self.trees) > 1 and (
            len(self.trees) > MAX_ROOTS or sum(self.bytes.values()) > MAX_HISTORY_BYTES
        ):
            self._let_go(store, next(iter(self.trees)))

    def _let_go(self, store: RunStore, root_id: int) -> None:
        ids = [i for i, r in self.root_of.items() if r == root_id]
        store.forget([i for i in ids if i in self.owned])
        for i in ids:
            self.paths.pop(i, None)
            self.parent.pop(i, None)
            self.root_of.pop(i, None)
            self.owned.discard(i)
        del self.trees[root_id]
        self.bytes.pop(root_id, None)

    def path_of(
        self, engine: Engine, store: RunStore, run_id: int, recorded: Any = None,
        cancel: threading.Event | None = None,
    ) -> tuple[PathRun, Revived | None]:  # fmt: skip
        """The path of a run and, when it had to be revived, the :class:`Revived`.

        A run outside every tree becomes the root of a new one; a run opened from a session
        (``recorded``, a ``SessionRun``) is first revived on ``engine``.
        """
        if run_id in self.paths:
            return self.paths[run_id], None
        run, revived = store.find(run_id), None
        if run is None and recorded is not None:
            revived = revive(engine, recorded, cancel)
            run = revived.run
            run.run_id = run_id
        if not isinstance(run, Run):
            raise PromptError("the shown run is not on the model thread any more: run it again")
        return self.add_root(store, run), revived

    def locate(self, path: PathRun, step: int) -> tuple[PathRun, int]:
        """The path whose own run made path step ``step``, and that run's local step index."""
        while step < path.offset:
            path = self.paths[self.parent[path.run_id]]
        return path, step - path.offset

    def grow(
        self, engine: Engine, store: RunStore, shown_id: int, step: int | None,
        token_id: int | None, max_new: int, new_id: int, recorded: Any = None,
        cancel: threading.Event | None = None,
    ) -> Growth:  # fmt: skip
        """Branch the shown run at path step ``step`` with ``token_id``, or (``step`` None)
        continue it from its end (:func:`~llm_lens.core.runs.branching.continue_run`: the
        tokens a longer run would have generated). The new run gets id ``new_id``."""
        shown, revived = self.path_of(engine, store, shown_id, recorded, cancel)
        owner, local = self.locate(shown, len(shown.steps) - 1 if step is None else step)
        old = owner.run.config
        config = RunConfig(max_new, old.stop_strings, old.top_n)
        if step is None:
            child = continue_run(engine, owner.run, config, cancel)
            token = owner.run.steps[local].token.id
        else:
            if token_id is None:
                raise PromptError("a branch needs the token to force at its step")
            token = int(token_id)
            child = branch(engine, owner.run, local, token, owner.run.params, config, cancel)
        child.run_id = new_id
        root_id = self.root_of[owner.run_id]
        self.trees[root_id].add(owner.run, local, token, child)
        self.parent[new_id] = owner.run_id
        path = PathRun.grown(shown, owner, local, token, child)
        return Growth(path, child, revived, lambda p: self._adopt(store, root_id, p))

    def _adopt(self, store: RunStore, root_id: int, path: PathRun) -> None:
        if root_id not in self.trees:  # let go while the branch ran
            return
        new_id = path.run_id
        self.paths[new_id], self.root_of[new_id] = path, root_id
        self.owned.add(new_id)
        self.bytes[root_id] += held_bytes(path.run)
        store.keep(new_id, path)
        self.trim(store)

    def saved_runs(
        self, make: Callable[..., Any], only: int | None = None
    ) -> tuple[list[Any], list[int]]:
        """Every run of every tree (or only of the tree holding run ``only``) as
        ``make(path, label, parent)``, oldest tree first, each root first and depth first; and
        their run ids in that order."""
        runs, order = [], []
        nodes = self.nodes()
        if only is not None:
            root = self.root_of.get(only)
            nodes = tuple(self.trees[root].nodes()) if root is not None else ()
        for node in nodes:
            path = self.paths.get(node.run_id)
            if path is None:  # a branch that failed before it finished
                continue
            parent, label = None, "run"
            if node.parent_run_id is not None:
                parent = (self.parent[node.run_id], path.offset - 1)
                forced = node.forced_token
                how = "continued" if node.continued or forced is None else f"forced {forced.text!r}"
                label = f"branch at step {path.offset - 1}, {how}"
            runs.append(make(path, label, parent))
            order.append(node.run_id)
        return runs, order
