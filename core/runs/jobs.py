"""Model-side jobs of the comparison, beam and branch views.

Each job takes the :class:`~llm_lens.core.runs.workbench.Workbench` and yields ``(tag, payload)``
pairs: a script iterates ``job(bench)``, the window's model thread
(``llm_lens.desktop.model_thread.worker.Worker.stream``) turns each into a signal. No Qt here, and
no cache or tensor in a payload: records, tuples of them and plain numbers only. The runs and
their history are the workbench's ``store`` and ``history`` (:mod:`llm_lens.core.runs.history`),
touched only on its thread.

A branch is shown the way it reads (``llm_lens.core.runs.branching.PathRun``): the root's
prompt, the steps
before the branch point, the forced token as the step it replaced, then the branch's own steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llm_lens.core.records import PrefillCapture, PromptTokens, RunSummary, StepRecord
from llm_lens.core.sampling import SamplingParams

if TYPE_CHECKING:
    from llm_lens.core.runs.workbench import Workbench

Item = tuple[str, Any]
Job = Callable[["Workbench"], Iterator[Item]]


@dataclass(frozen=True)
class CompareStart:
    """A comparison whose shared prefill is done; its columns are about to stream."""

    prompt: PromptTokens
    params: tuple[SamplingParams, ...]
    run_ids: tuple[int, ...]
    shared_prefill_ms: float
    prefill_saved_ms: float
    samples: bool = False  # K samples of one setting (seeds s … s+K−1), not 2–4 settings
    interventions: tuple[tuple[Any, ...], ...] = ()  # each column's (core.interventions); ()
    own_prefill: tuple[bool, ...] = ()  # each column: it read the prompt itself, under them


@dataclass(frozen=True)
class CompareOutcome:
    """The numbers of a finished comparison (see :class:`core.runs.compare.Comparison`)."""

    columns: tuple[Any, ...]  # core.runs.compare.ColumnStats
    divergence_step: int | None
    kl_per_step: tuple[float, ...]
    overlap_per_step: tuple[float, ...]
    prefills: tuple[PrefillCapture | None, ...]
    finish_reasons: tuple[str | None, ...]
    own_kl_per_step: tuple[float, ...] = ()  # each column's own distribution, own text
    own_overlap_per_step: tuple[float, ...] = ()

    @classmethod
    def of(cls, comparison: Any, runs: Sequence[Any]) -> CompareOutcome:
        """The numbers of a ``core.runs.compare.Comparison`` whose columns are ``runs`` (live runs,
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
    interventions: tuple[Any, ...] = ()  # what the run changed in the model (core.interventions)

    @classmethod
    def of(cls, path: Any) -> ShownRun:
        """A ``core.runs.branching.PathRun``, to show."""
        return cls(path.run_id, path.prompt, path.prefill, tuple(path.steps), path.summary(),
                   path.params, tuple(path.interventions))  # fmt: skip


@dataclass(frozen=True)
class BeamFrame:
    """One beam-search step, each live beam's text so far and each finished beam's text."""

    step: Any  # core.runs.beam.BeamStep
    texts: tuple[str, ...]
    finished: tuple[str, ...] = ()  # texts of step.finished, best first


def compare_job(
    text: str,
    chat: bool,
    configs: Sequence[SamplingParams],
    max_new: int,
    run_ids: Sequence[int],
    drop: Callable[[Workbench], None],
    samples: bool = False,
    interventions: Sequence[Sequence[Any]] = (),
) -> Job:
    """Columns from one shared prefill (``core.runs.compare.start_shared``), streamed round-robin.
    ``drop(bench)`` first forgets the runs of the previous comparison. ``interventions``: each
    column's (empty: all clean); a column whose changes alter the prompt's pass reads it alone."""
    changes = tuple(tuple(c) for c in interventions) or ((),) * len(configs)

    def job(bench: Workbench) -> Iterator[Item]:
        from llm_lens.core.loop.engine import RunConfig
        from llm_lens.core.runs.compare import start_shared

        engine = bench.engine
        drop(bench)
        prompt = engine.tokenize(text, chat)
        config = RunConfig(max_new_tokens=max_new)
        comparison = start_shared(engine, prompt, list(configs), config, bench.cancel, changes)
        for run, run_id in zip(comparison.runs, run_ids, strict=True):
            run.run_id = run_id  # type: ignore[attr-defined]  # live runs, not recorded columns
            bench.store.keep(run_id, run)
        ms = comparison.shared_prefill_ms
        yield (
            "compare_started",
            CompareStart(
                prompt,
                tuple(configs),
                tuple(run_ids),
                ms,
                comparison.prefill_saved_ms,
                samples,
                changes,
                comparison.own_prefill,
            ),  # fmt: skip
        )
        for column, record in comparison.steps():
            yield "compare_step", (column, record)
        yield "compare_done", CompareOutcome.of(comparison, comparison.runs)

    return job


def beam_job(text: str, chat: bool, beams: int, max_new: int) -> Job:
    """``core.runs.beam.BeamSearch`` step by step, then its result."""

    def job(bench: Workbench) -> Iterator[Item]:
        from llm_lens.core.runs.beam import BeamSearch

        engine = bench.engine
        prompt = engine.tokenize(text, chat)
        search = BeamSearch(engine, prompt, beams, max_new, cancel=bench.cancel)
        yield "beam_started", prompt
        for step in search:
            live = tuple(engine.texts.join(b) for b in step.beams)
            done = tuple(engine.texts.join(h.token_ids) for h in step.finished)
            yield "beam_step", BeamFrame(step, live, done)
        yield "beam_done", search.result()

    return job


def register_job(run_id: int) -> Callable[[Workbench], None]:
    """An analysis job that makes a kept run answer analyses again (after a newer run)."""

    def job(bench: Workbench) -> None:
        run = bench.store.kept.get(run_id)
        if run is None:
            raise ValueError("that run is no longer kept on the model thread: run it again")
        bench.store.runs[run_id] = run

    return job


# --- branches ------------------------------------------------------------------------------------


def grow_job(
    shown_id: int, step: int | None, token_id: int | None, max_new: int, new_id: int,
    recorded: Any = None,
) -> Job:  # fmt: skip
    """Branch the shown run at path step ``step`` with ``token_id``, or (``step`` None) let it
    go on from its end; the new path streams like a run and joins the workbench's
    :class:`~llm_lens.core.runs.history.RunHistory`. ``recorded`` is the shown run's
    ``SessionRun`` when it was opened from a session (it is revived first)."""

    def job(bench: Workbench) -> Iterator[Item]:
        history, store = bench.history, bench.store
        growth = history.grow(bench.engine, store, shown_id, step, token_id, max_new, new_id,
                              recorded, bench.cancel)  # fmt: skip
        revived = growth.revived
        if revived is not None:
            yield "revived", (revived.max_logit_diff, revived.logit_scale, revived.matches)
        path = growth.path
        yield "run_started", path.prompt
        yield "prefill", path.prefill
        yield from (("step", s) for s in list(path.steps))
        yield from (("step", s) for s in growth)
        shown_run = ShownRun.of(path)
        yield "run_finished", shown_run.summary
        yield "branch_done", (shown_run, history.nodes())

    return job
