"""One session out of many runs: an exploration's history (every run with its branches), its
last comparison, the run shown, and the runs of a reopened file that were not revived.

The window's model thread calls :func:`assemble_session` when saving; a script can too, with a
:class:`~llm_lens.core.runs.history.RunHistory` and :class:`~llm_lens.core.runs.history.RunStore`
of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_lens.core.runs.history import RunHistory, RunStore
from llm_lens.core.sessions.format import Session, SessionComparison, SessionRun


@dataclass
class Origin:
    """A reopened file some of whose runs were made live again (continued or branched).

    ``session`` is the file with its runs renumbered once (their ids could clash with the
    exploration's); ``revived`` maps its run ids to the live roots made of them. Its other runs
    stay listed and are saved with the exploration's.
    """

    session: Session
    path: str | None
    revived: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, session: Session, path: str | None, new_id: Callable[[], int]) -> Origin:
        """``session`` renumbered with fresh ids from ``new_id`` (parents follow their runs)."""
        ids = {r.run_id: new_id() for r in session.runs}
        runs = tuple(
            dataclasses.replace(
                r,
                run_id=ids[r.run_id],
                parent=None if r.parent is None else (ids.get(r.parent[0], -1), r.parent[1]),
            )
            for r in session.runs
        )
        return cls(dataclasses.replace(session, runs=runs), path)

    def kept_runs(self) -> list[SessionRun]:
        """The file's runs that were not revived."""
        return [r for r in self.session.runs if r.run_id not in self.revived]

    def saved(self) -> tuple[tuple[SessionRun, ...], tuple[SessionComparison, ...]]:
        """(Runs, comparisons) to save: the runs not revived (children of a revived run point
        to its live root), and the comparisons all of whose runs are among them."""
        revived = self.revived
        kept = self.kept_runs()
        runs = tuple(
            dataclasses.replace(r, parent=(revived[r.parent[0]], r.parent[1]))
            if r.parent is not None and r.parent[0] in revived
            else r
            for r in kept
        )
        where = {r.run_id: i for i, r in enumerate(kept)}
        index = [where.get(r.run_id) for r in self.session.runs]
        comparisons = tuple(
            SessionComparison(tuple(index[i] for i in c.runs), c.shared_prefill_ms)  # type: ignore[misc]
            for c in self.session.comparisons
            if all(index[i] is not None for i in c.runs)
        )
        return runs, comparisons


def assemble_session(
    info: Any,
    history: RunHistory,
    store: RunStore,
    shown_id: int,
    make: Callable[..., SessionRun],
    compared: tuple[Sequence[int], float] | None = None,
    only: int | None = None,
    origin: Origin | None = None,
) -> Session:
    """The session of an exploration: ``history``'s runs (or only the tree holding ``only``),
    a reopened file's runs kept by ``origin``, the comparison ``compared`` (its columns' run
    ids and shared prefill ms) and the run ``shown_id``, each run made by ``make(run, label,
    parent)``. Raises ``ValueError`` when there is nothing to save."""
    runs, order = history.saved_runs(make, only)
    kept, kept_comparisons = origin.saved() if origin is not None else ((), ())
    runs, order = [*kept, *runs], [r.run_id for r in kept] + order
    comparisons = list(kept_comparisons)
    if compared is not None:
        ids, shared_ms = compared
        columns = [store.kept.get(i) for i in ids]
        if all(c is not None for c in columns):
            at = []
            for k, (i, column) in enumerate(zip(ids, columns, strict=True)):
                if i not in order:  # a column branched from is in the history already
                    runs.append(make(column, f"compare column {k + 1}"))
                    order.append(i)
                at.append(order.index(i))
            comparisons.append(SessionComparison(tuple(at), shared_ms))
    if shown_id not in order:
        run = store.runs.get(shown_id)
        if run is not None:
            runs.append(make(run))
            order.append(shown_id)
        elif not comparisons:
            raise ValueError("there is no run to save")
    shown = order.index(shown_id) if shown_id in order else comparisons[0].runs[0]
    return Session(info.as_dict(), tuple(runs), shown=shown, comparisons=tuple(comparisons))


def with_runs(session: Session, runs: Sequence[SessionRun]) -> Session:
    """``session`` with ``runs`` added: one with the id of a run already in it takes its place
    (the shown run, saved plainly, gets its branch parent), the others go after it, so the
    shown run and the comparisons keep their indices (a served branch tree: its runs live
    outside the history)."""
    if not runs:
        return session
    where = {r.run_id: i for i, r in enumerate(session.runs)}
    kept = list(session.runs)
    for run in runs:
        if run.run_id in where:
            kept[where[run.run_id]] = run
        else:
            where[run.run_id] = len(kept)
            kept.append(run)
    return dataclasses.replace(session, runs=tuple(kept))
