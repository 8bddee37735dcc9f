"""A reopened file inside an exploration (``core/sessions/assemble.py``'s :class:`Origin`): its
runs renumbered with their parents, the revived ones left out of the save with their children
pointing at the live roots, and the comparisons re-indexed or dropped."""

from __future__ import annotations

import itertools

from llm_lens.core.records import PromptTokens
from llm_lens.core.sessions.assemble import Origin, with_runs
from llm_lens.core.sessions.format import Session, SessionComparison, SessionRun


def run(run_id: int, parent: tuple[int, int] | None = None) -> SessionRun:
    prompt = PromptTokens("x", "x", False, ())
    return SessionRun(run_id, f"run {run_id}", parent, prompt, {}, "length", ())


def reopened() -> Session:
    """Root 1 with a branch 2 at step 3 (and 3 at step 1 of the branch), a lone run 4; runs 0
    and 3 compared, runs 1 and 3 compared."""
    runs = (run(1), run(2, (1, 3)), run(3, (2, 1)), run(4))
    comparisons = (SessionComparison((0, 3), 12.5), SessionComparison((2, 3), 4.0))
    return Session({"name": "m"}, runs, comparisons=comparisons)


def test_origin_renumbers_runs_and_their_parents_once():
    ids = itertools.count(100)
    origin = Origin.of(reopened(), "a.llmlens", lambda: next(ids))
    got = [(r.run_id, r.parent, r.label) for r in origin.session.runs]
    assert got == [
        (100, None, "run 1"),
        (101, (100, 3), "run 2"),
        (102, (101, 1), "run 3"),
        (103, None, "run 4"),
    ]
    assert origin.path == "a.llmlens" and origin.revived == {}
    assert origin.session.comparisons == reopened().comparisons  # indices, not ids: unchanged
    runs, comparisons = origin.saved()  # nothing revived: everything saved as it was
    assert runs == origin.session.runs and comparisons == reopened().comparisons


def test_a_revived_run_is_left_out_and_its_children_point_at_the_live_root():
    ids = itertools.count(100)
    origin = Origin.of(reopened(), None, lambda: next(ids))
    origin.revived[100] = 7  # run 1 (now 100) continued live as run 7
    assert [r.run_id for r in origin.kept_runs()] == [101, 102, 103]
    runs, comparisons = origin.saved()
    assert [(r.run_id, r.parent) for r in runs] == [(101, (7, 3)), (102, (101, 1)), (103, None)]
    # (0, 3) named the revived run: dropped; (2, 3) re-indexed among the kept runs
    assert comparisons == (SessionComparison((1, 2), 4.0),)


def test_with_runs_puts_a_run_in_its_place_and_adds_the_others_after():
    """A served tree saved beside the shown run: the shown run (same id) gets its parent in
    place, so the shown index and the comparisons keep pointing at the same runs."""
    session = Session({"name": "m"}, (run(5), run(1)), shown=0,
                      comparisons=(SessionComparison((0, 1), 1.0),))  # fmt: skip
    tree = [run(1), run(3, (1, 2)), run(5, (3, 4))]
    got = with_runs(session, tree)
    assert [(r.run_id, r.parent) for r in got.runs] == [(5, (3, 4)), (1, None), (3, (1, 2))]
    assert got.shown_index == 0 and got.comparisons == session.comparisons
    assert with_runs(session, []) is session
