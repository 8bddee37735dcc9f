"""The Compare view's job against a server: one streamed request per column, in flight
together, their tokens yielded as they arrive (the same ``compare_started`` / ``compare_step`` /
``compare_done`` items as the local :func:`~llm_lens.core.runs.jobs.compare_job`).

A server keeps no prefill to share and returns no logits, so what a local comparison draws from
a column's logits is drawn here from what the server sent: the dashed curves (each column's own
distribution on its own text) from each step's returned alternatives, exact only where the
server returned the whole distribution (vLLM with ``--max-logprobs -1``); the solid curves
(one text scored under every column's settings) need logits and are left empty, with the line
saying why. A column whose request fails keeps the tokens it received and carries its line.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from llm_lens.core.engines.openai.client import ServerError
from llm_lens.core.engines.openai.engine import OpenAIEngine, ServedRun
from llm_lens.core.engines.openai.jobs import MAX_PARALLEL
from llm_lens.core.errors import LensError
from llm_lens.core.records import StepRecord
from llm_lens.core.runs.jobs import CompareOutcome, CompareStart, Item, Job

if TYPE_CHECKING:
    from llm_lens.core.runs.workbench import Workbench
    from llm_lens.core.sampling import SamplingParams

NO_KL = (
    "no KL: with only the top alternatives, a token one column lists and another does not has "
    "an unknown probability there (vLLM with --max-logprobs -1 returns them all)"
)
SOLID_MISSING = (
    "no solid curve: a server returns no logits, so one column's text cannot be scored under "
    "another column's settings; open the model locally for it"
)
_END = object()  # a column's stream has ended


@dataclass(frozen=True)
class ServedCompareStart(CompareStart):
    """A served comparison about to stream: ``where`` the server (URL, no credentials), and per
    column whether its numbers are ``exact`` (the whole distribution came back)."""

    where: str = ""
    exact: tuple[bool, ...] = ()
    top_n: int = 0  # alternatives asked per token (-1: every token)


@dataclass(frozen=True)
class ServedCompareOutcome(CompareOutcome):
    """A finished served comparison: per column the line its request failed with (None: it
    ended as the server said), and what the curves are (``curves_note``)."""

    errors: tuple[str | None, ...] = ()
    curves_note: str = ""


def column_note(exact: bool, top_n: int) -> str:
    """What a column's probabilities are: the whole distribution, or the top alternatives."""
    if exact:
        return "exact: the server returned every token's log-probability"
    return f"approximate: the server returned the top {top_n} alternatives only"


def stream_columns(
    runs: Sequence[ServedRun], parallel: int = MAX_PARALLEL
) -> Iterator[tuple[int, StepRecord]]:
    """Each run's records as ``(column, record)`` in the order they arrive, at most ``parallel``
    requests in flight. A request the server refuses (a ``ServerError`` before its first token)
    ends that column with its line in ``run.stop_error``; the other columns go on. A bug in a
    column's thread is raised here once every column has ended."""
    arrived: queue.Queue[tuple[int, Any]] = queue.Queue()
    slots = threading.BoundedSemaphore(max(1, parallel))

    def drain(column: int, run: ServedRun) -> None:
        with slots:
            try:
                for record in run:
                    arrived.put((column, record))
            except ServerError:
                pass  # the run keeps the line (stop_error) and its finish reason "error"
            except BaseException as exc:  # a bug: raised on the job's thread
                arrived.put((column, exc))
            finally:
                arrived.put((column, _END))

    for column, run in enumerate(runs):
        threading.Thread(target=drain, args=(column, run), daemon=True).start()
    live, bug = len(runs), None
    while live:
        column, item = arrived.get()
        if item is _END:
            live -= 1
        elif isinstance(item, BaseException):
            bug = bug or item
        else:
            yield column, item
    if bug is not None:
        raise bug


def token_keys(step: StepRecord) -> list[object]:
    """Each returned alternative's identity across columns: its id where the server sends
    ids, else its text."""
    return [int(i) if i >= 0 else t for i, t in zip(step.top_ids, step.top_texts, strict=True)]


def step_distribution(step: StepRecord, keys: dict[object, int]) -> np.ndarray:
    """(len(keys),) float64: the step's returned probabilities placed by ``keys``; tokens it
    did not return hold 0."""
    probs = np.zeros(len(keys))  # (tokens returned by any column,)
    for key, p in zip(token_keys(step), step.top_probs, strict=True):
        probs[keys[key]] = float(p)
    return probs


def own_curves(runs: Sequence[ServedRun]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean pairwise KL and overlap at every step between the distributions the columns
    received, each on its own text (NaN where fewer than two columns reached the step, or a
    column's step came without alternatives). With only the top alternatives the overlap is
    over the tokens listed (a lower bound of the whole one) and KL is NaN (:data:`NO_KL`)."""
    from llm_lens.core.runs.compare import pairwise

    kls, overlaps = [], []
    for i in range(max((len(r.steps) for r in runs), default=0)):
        steps = [r.steps[i] for r in runs if len(r.steps) > i and len(r.steps[i].top_probs)]
        if len(steps) < 2:
            kls.append(float("nan"))
            overlaps.append(float("nan"))
            continue
        keys: dict[object, int] = {}
        for step in steps:
            for key in token_keys(step):
                keys.setdefault(key, len(keys))
        kl, overlap = pairwise(np.stack([step_distribution(s, keys) for s in steps]))
        n, whole = len(steps), not any(s.approximate for s in steps)
        kls.append(float((kl.sum() - np.trace(kl)) / (n * (n - 1))) if whole else math.nan)
        overlaps.append(float((overlap.sum() - np.trace(overlap)) / (n * (n - 1))))
    return tuple(kls), tuple(overlaps)


def served_stats(run: ServedRun) -> Any:
    """A column's :class:`~llm_lens.core.runs.compare.ColumnStats` (log-probs as the server
    reported them)."""
    from llm_lens.core.runs.compare import ColumnStats

    logprobs = [s.logprob for s in run.steps]
    mean = float(np.mean(logprobs)) if logprobs else 0.0
    summary = run.summary()
    return ColumnStats(len(logprobs), summary.tokens_per_s, mean, math.exp(-mean),
                       summary.finish_reason)  # fmt: skip


def served_outcome(runs: Sequence[ServedRun]) -> ServedCompareOutcome:
    """The numbers of finished served columns: each column's length, speed, mean log-prob and
    finish; the first step two columns chose differently (by token bytes where the server
    sends no ids); the dashed curves from the returned alternatives."""
    from llm_lens.core.runs.compare import divergence_step

    own_kl, own_overlap = own_curves(runs)
    exact = all(not s.approximate for r in runs for s in r.steps)
    note = "dashed: each column's distribution as the server returned it, on its own text"
    if not exact:
        note += " (approximate: the overlap counts the returned alternatives only, a lower "
        note += f"bound) · {NO_KL}"
    return ServedCompareOutcome(
        columns=tuple(served_stats(r) for r in runs),
        divergence_step=divergence_step(cast(Any, [[s.token.raw for s in r.steps] for r in runs])),
        kl_per_step=(),
        overlap_per_step=(),
        prefills=tuple(None for _ in runs),
        finish_reasons=tuple(r.finish_reason for r in runs),
        own_kl_per_step=own_kl,
        own_overlap_per_step=own_overlap,
        errors=tuple(r.stop_error for r in runs),
        curves_note=f"{note} · {SOLID_MISSING}",
    )


def served_compare_job(
    text: str,
    chat: bool,
    configs: Sequence[SamplingParams],
    max_new: int,
    run_ids: Sequence[int],
    drop: Callable[[Workbench], None],
    samples: bool = False,
) -> Job:
    """The Compare view's columns as parallel requests to the workbench's server: one column
    per sampler setting (or per seed, for K samples), streamed as the tokens arrive; each run
    is kept under its id so that a column can be shown in the panes; ``drop(bench)`` first
    forgets the runs of the previous comparison."""

    def job(bench: Workbench) -> Iterator[Item]:
        from llm_lens.core.loop.engine import RunConfig

        engine = bench.engine
        if not isinstance(engine, OpenAIEngine):
            raise LensError("a served comparison needs a server opened (File → Open server…)")
        drop(bench)
        prompt = engine.tokenize(text, chat)
        config = RunConfig(max_new_tokens=max_new)
        runs = [engine.start(prompt, p, config, bench.cancel) for p in configs]
        for run, run_id in zip(runs, run_ids, strict=True):
            run.run_id = run_id
            bench.store.keep(run_id, run)
        exact = engine.whole_distribution
        start = ServedCompareStart(
            prompt, tuple(configs), tuple(run_ids), 0.0, 0.0, samples,
            where=engine.endpoint.public, exact=(exact,) * len(runs), top_n=engine.top_logprobs,
        )  # fmt: skip
        yield "compare_started", start
        for column, record in stream_columns(runs):
            yield "compare_step", (column, record)
        if all(not r.steps and r.stop_error for r in runs):  # nothing came back at all
            raise ServerError(str(runs[0].stop_error))
        yield "compare_done", served_outcome(runs)

    return job
