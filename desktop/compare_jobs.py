"""Worker-side jobs of the comparison, beam and branch views.

Each job is a generator of ``(tag, payload)`` pairs that :meth:`desktop.worker.Worker.stream`
runs on the model thread. No Qt here, and no cache or tensor in a payload: records, tuples of
them and plain numbers only. The :class:`BranchBook` is touched only on the worker thread.

A branch is shown the way it reads (``core.branching.PathRun``): the root's prompt, the steps
before the branch point, the forced token as the step it replaced, then the branch's own steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llm_lens.core.records import PrefillCapture, PromptTokens, RunSummary, StepRecord
from llm_lens.core.sampling import SamplingParams

if TYPE_CHECKING:  # torch is imported on the model thread only, when a job runs
    from llm_lens.core.runs.branching import PathRun

Item = tuple[str, Any]
Job = Callable[[Any], Iterator[Item]]


@dataclass(frozen=True)
class CompareStart:
    """A comparison whose shared prefill is done; its columns are about to stream."""

    prompt: PromptTokens
    params: tuple[SamplingParams, ...]
    run_ids: tuple[int, ...]
    shared_prefill_ms: float
    prefill_saved_ms: float
    samples: bool = False  # K samples of one setting (seeds s … s+K−1), not 2–4 settings


@dataclass(frozen=True)
class CompareOutcome:
    """The numbers of a finished comparison (see :class:`core.compare.Comparison`)."""

    columns: tuple[Any, ...]  # core.compare.ColumnStats
    divergence_step: int | None
    kl_per_step: tuple[float, ...]
    overlap_per_step: tuple[float, ...]
    prefills: tuple[PrefillCapture | None, ...]
    finish_reasons: tuple[str | None, ...]
    own_kl_per_step: tuple[float, ...] = ()  # each column's own distribution, own text
    own_overlap_per_step: tuple[float, ...] = ()

    @classmethod
    def of(cls, comparison: Any, runs: Sequence[Any]) -> CompareOutcome:
        """The numbers of a ``core.compare.Comparison`` whose columns are ``runs`` (live runs,
        or a session's recorded ones)."""
        return cls(
            tuple(comparison.columns()),
            comparison.divergence_step,
            tuple(comparison.kl_per_step),
            tuple(comparison.overlap_per_step),
            tuple(r.prefill for r in runs),
            tuple(r.finish_reason for r in runs),
            tuple(comparison.own_kl_per_step),
            tuple(comparison.own_overlap_per_step),
        )


@dataclass(frozen=True)
class ShownRun:
    """What the panes need to show a finished run made on the worker."""

    run_id: int
    prompt: PromptTokens
    prefill: PrefillCapture | None
    steps: tuple[StepRecord, ...]
    summary: RunSummary
    params: SamplingParams

    @classmethod
    def of(cls, path: Any) -> ShownRun:
        """A ``core.branching.PathRun``, to show."""
        return cls(path.run_id, path.prompt, path.prefill, tuple(path.steps), path.summary(),
                   path.params)  # fmt: skip


@dataclass(frozen=True)
class BeamFrame:
    """One beam-search step and each live beam's text so far."""

    step: Any  # core.beam.BeamStep
    texts: tuple[str, ...]


def keep(worker: Any, run_id: int, run: Any) -> None:
    """Make ``run`` answer analyses now, and keep it for showing and branching later."""
    worker.runs[run_id] = run
    worker.kept_runs[run_id] = run


def forget(worker: Any, run_ids: Sequence[int]) -> None:
    """Let runs go (unless a newer request showed them again: they stay in ``runs`` then)."""
    for run_id in run_ids:
        worker.kept_runs.pop(run_id, None)
        worker.runs.pop(run_id, None)


def compare_job(
    text: str,
    chat: bool,
    configs: Sequence[SamplingParams],
    max_new: int,
    run_ids: Sequence[int],
    drop: Callable[[Any], None],
    samples: bool = False,
) -> Job:
    """Columns from one shared prefill (``core.compare.start_shared``), streamed round-robin.
    ``drop(worker)`` first forgets the runs of the previous comparison."""

    def job(worker: Any) -> Iterator[Item]:
        from llm_lens.core.loop.engine import RunConfig
        from llm_lens.core.runs.compare import start_shared

        engine = worker.engine
        drop(worker)
        prompt = engine.tokenize(text, chat)
        config = RunConfig(max_new_tokens=max_new)
        comparison = start_shared(engine, prompt, list(configs), config, worker.cancel)
        for run, run_id in zip(comparison.runs, run_ids, strict=True):
            run.run_id = run_id
            keep(worker, run_id, run)
        ms = comparison.shared_prefill_ms
        yield (
            "compare_started",
            CompareStart(
                prompt, tuple(configs), tuple(run_ids), ms, comparison.prefill_saved_ms, samples
            ),  # fmt: skip
        )
        for column, record in comparison.steps():
            yield "compare_step", (column, record)
        yield "compare_done", CompareOutcome.of(comparison, comparison.runs)

    return job


def beam_job(text: str, chat: bool, beams: int, max_new: int) -> Job:
    """``core.beam.BeamSearch`` step by step, then its result."""

    def job(worker: Any) -> Iterator[Item]:
        from llm_lens.core.runs.beam import BeamSearch

        engine = worker.engine
        prompt = engine.tokenize(text, chat)
        search = BeamSearch(engine, prompt, beams, max_new, cancel=worker.cancel)
        yield "beam_started", prompt
        for step in search:
            yield "beam_step", BeamFrame(step, tuple(engine.texts.join(b) for b in step.beams))
        yield "beam_done", search.result()

    return job


def register_job(worker: Any, run_id: int) -> Callable[[], None]:
    """An analysis job that makes a kept run answer analyses again (after a newer run)."""

    def job() -> None:
        run = worker.kept_runs.get(run_id)
        if run is None:
            raise ValueError("that run is no longer kept on the model thread: run it again")
        worker.runs[run_id] = run

    return job


# --- branches ------------------------------------------------------------------------------------


MAX_ROOTS = 12  # live runs kept in the history (each with its branches); older ones are let go
MAX_HISTORY_BYTES = 1 << 30  # and no more than this held by them (a 4,000-token prompt's
# hidden states alone are 290 MB); the newest run is always kept


def held_bytes(run: Any, steps: Sequence[StepRecord] | None = None) -> int:
    """Bytes a kept run holds: its prefill's hidden states, its steps' arrays, its KV cache."""
    steps = run.steps if steps is None else steps
    total = 0 if run.prefill is None else run.prefill.hidden.nbytes
    for s in steps:
        total += s.logits.nbytes + s.hidden.nbytes + s.attn_update.nbytes + s.attention.nbytes
    return total + (steps[-1].kv.bytes_total if steps else 0)


class BranchBook:
    """The runs of this window: every live run is the root of a
    :class:`core.branching.BranchTree` of its branches and continuations (the oldest roots are
    let go beyond :data:`MAX_ROOTS`), and the path of each run. Worker thread only."""

    def __init__(self) -> None:
        self.trees: dict[int, Any] = {}  # root run id → BranchTree, oldest first
        self.root_of: dict[int, int] = {}  # path id → its tree's root id
        self.paths: dict[int, PathRun] = {}
        self.parent: dict[int, int] = {}
        self.owned: set[int] = set()  # run ids this book put into ``kept_runs``
        self.bytes: dict[int, int] = {}  # root id → bytes its tree holds

    def reset(self, worker: Any) -> None:
        forget(worker, list(self.owned))
        self.trees, self.root_of, self.paths, self.parent, self.owned = {}, {}, {}, {}, set()
        self.bytes = {}

    def holds(self, run_id: int) -> bool:
        return run_id in self.paths

    def nodes(self) -> tuple[Any, ...]:
        """Every run of every tree (``BranchNode``), oldest tree first, each depth first."""
        return tuple(node for tree in self.trees.values() for node in tree.nodes())

    def add_root(self, worker: Any, run: Any) -> PathRun:
        """Make a finished run the root of a new tree (and keep it on the worker)."""
        from llm_lens.core.runs.branching import BranchTree
        from llm_lens.core.runs.branching import PathRun as Path

        run_id = run.run_id
        if run_id not in worker.kept_runs:  # a live run: this book keeps it from now on
            self.owned.add(run_id)
        self.trees[run_id] = BranchTree(run)
        self.root_of[run_id] = run_id
        self.paths[run_id] = root = Path.root(run)
        self.bytes[run_id] = held_bytes(run)
        keep(worker, run_id, run)
        self._trim(worker)
        return root

    def _trim(self, worker: Any) -> None:
        """Let the oldest trees go while there are too many or they hold too much."""
        while len(self.trees) > 1 and (
            len(self.trees) > MAX_ROOTS or sum(self.bytes.values()) > MAX_HISTORY_BYTES
        ):
            self._let_go(worker, next(iter(self.trees)))

    def _let_go(self, worker: Any, root_id: int) -> None:
        ids = [i for i, r in self.root_of.items() if r == root_id]
        forget(worker, [i for i in ids if i in self.owned])
        for i in ids:
            self.paths.pop(i, None)
            self.parent.pop(i, None)
            self.root_of.pop(i, None)
            self.owned.discard(i)
        del self.trees[root_id]
        self.bytes.pop(root_id, None)

    def add_history(self, worker: Any, run: Any) -> tuple[ShownRun, tuple[Any, ...]]:
        """A finished live run joins the history: (it, to show; every node)."""
        return ShownRun.of(self.add_root(worker, run)), self.nodes()

    def _path(self, worker: Any, run_id: int, recorded: Any = None) -> tuple[PathRun, Any]:
        """The path of a run and, when it had to be revived, the ``core.resume.Revived``.

        A run outside every tree becomes the root of a new one; a run opened from a session
        (``recorded``, a ``SessionRun``) is first revived on the loaded model.
        """
        from llm_lens.core.errors import PromptError
        from llm_lens.core.loop.engine import Run
        from llm_lens.core.runs.resume import revive

        if run_id in self.paths:
            return self.paths[run_id], None
        run = worker.kept_runs.get(run_id) or worker.runs.get(run_id)
        revived = None
        if run is None and recorded is not None:
            revived = revive(worker.engine, recorded, worker.cancel)
            run = revived.run
            run.run_id = run_id
        if not isinstance(run, Run):
            raise PromptError("the shown run is not on the model thread any more: run it again")
        return self.add_root(worker, run), revived

    def locate(self, path: PathRun, step: int) -> tuple[PathRun, int]:
        """The path whose own run made path step ``step``, and that run's local step index."""
        while step < path.offset:
            path = self.paths[self.parent[path.run_id]]
        return path, step - path.offset

    def branch_job(
        self, shown_id: int, step: int, token_id: int, max_new: int, new_id: int,
        recorded: Any = None,
    ) -> Job:  # fmt: skip
        """Continue the shown run as if path step ``step`` had chosen ``token_id``.
        ``recorded`` is the shown run's ``SessionRun`` when it was opened from a session."""
        return self._grow(shown_id, step, token_id, max_new, new_id, recorded)

    def continue_job(self, shown_id: int, max_new: int, new_id: int, recorded: Any = None) -> Job:
        """Let the shown run go on for ``max_new`` more tokens (``core.branching.continue_run``:
        the same tokens a longer run would have generated)."""
        return self._grow(shown_id, None, None, max_new, new_id, recorded)

    def _grow(
        self, shown_id: int, step: int | None, token_id: int | None, max_new: int, new_id: int,
        recorded: Any,
    ) -> Job:  # fmt: skip
        def job(worker: Any) -> Iterator[Item]:
            from llm_lens.core.loop.engine import RunConfig
            from llm_lens.core.runs.branching import PathRun as Path
            from llm_lens.core.runs.branching import branch, continue_run

            shown, revived = self._path(worker, shown_id, recorded)
            if revived is not None:
                yield "revived", (revived.max_logit_diff, revived.logit_scale, revived.matches)
            at_end = step is None
            owner, local = self.locate(shown, len(shown.steps) - 1 if at_end else step)
            old = owner.run.config
            config = RunConfig(max_new, old.stop_strings, old.top_n)
            if at_end:
                child = continue_run(worker.engine, owner.run, config, worker.cancel)
                token = owner.run.steps[local].token.id
            else:
                token = int(token_id)  # type: ignore[arg-type]
                child = branch(worker.engine, owner.run, local, token, owner.run.params, config,
                               worker.cancel)  # fmt: skip
            child.run_id = new_id
            root_id = self.root_of[owner.run_id]
            self.trees[root_id].add(owner.run, local, token, child)
            self.parent[new_id] = owner.run_id
            path = Path.grown(shown, owner, local, token, child)
            yield "run_started", path.prompt
            yield "prefill", path.prefill
            yield from (("step", s) for s in list(path.steps))
            for record in child:
                yield "step", path.add(record)
            path.finish_reason = child.finish_reason
            if root_id in self.trees:  # not let go meanwhile
                self.paths[new_id], self.root_of[new_id] = path, root_id
                self.owned.add(new_id)
                self.bytes[root_id] += held_bytes(child)
                keep(worker, new_id, path)
                self._trim(worker)
            shown_run = ShownRun.of(path)
            yield "run_finished", shown_run.summary
            yield "branch_done", (shown_run, self.nodes())

        return job

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
            parent = None
            label = "run"
            if node.parent_run_id is not None:
                parent = (self.parent[node.run_id], path.offset - 1)
                how = "continued" if node.continued else f"forced {node.forced_token.text!r}"
                label = f"branch at step {path.offset - 1}, {how}"
            runs.append(make(path, label, parent))
            order.append(node.run_id)
        return runs, order
