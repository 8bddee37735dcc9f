"""The runs of an exploration: a bounded history of trees of branches, assembled into one
session (no Qt: the window and a script use the same objects)."""

from __future__ import annotations

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.runs import history as history_module
from llm_lens.core.runs.history import RunHistory, RunStore
from llm_lens.core.sampling import GREEDY


def test_the_book_lets_the_oldest_runs_go(tiny_engine, monkeypatch):
    monkeypatch.setattr(history_module, "MAX_ROOTS", 2)
    store, book = RunStore(), RunHistory()
    for run_id in (1, 2, 3):
        run = tiny_engine.start(tiny_engine.tokenize("hi", chat=False), GREEDY, RunConfig(2))
        run.run_all()
        run.run_id = run_id
        shown = book.add_root(store, run)
        nodes = book.nodes()
        assert shown.run_id == run_id and shown.steps == run.steps
    assert [n.run_id for n in nodes] == [2, 3] and all(n.prompt == "hi" for n in nodes)
    assert set(store.kept) == {2, 3} and set(store.runs) == {2, 3}
    assert not book.holds(1) and book.holds(3)


def test_the_book_holds_a_bounded_number_of_bytes(tiny_engine, monkeypatch):
    from llm_lens.core.runs.history import held_bytes

    store, book = RunStore(), RunHistory()
    runs = []
    for run_id in (1, 2, 3):
        run = tiny_engine.start(tiny_engine.tokenize("hello", chat=False), GREEDY, RunConfig(3))
        run.run_all()
        run.run_id = run_id
        runs.append(run)
    one = held_bytes(runs[0])
    assert one >= runs[0].prefill.hidden.nbytes + sum(s.logits.nbytes for s in runs[0].steps)
    monkeypatch.setattr(history_module, "MAX_HISTORY_BYTES", 2 * one + one // 2)
    for run in runs:
        book.add_root(store, run)
    assert set(book.trees) == {2, 3}  # three would hold more than the limit
    monkeypatch.setattr(history_module, "MAX_HISTORY_BYTES", 1)
    book.trim(store)
    assert set(book.trees) == {3}  # the newest run is always kept


def test_a_script_branches_continues_and_saves_the_whole_tree(tiny_engine, tmp_path):
    """The history works without a window: a run, a branch and a continuation of the branch,
    assembled into one session whose parents point along the tree."""
    from llm_lens.core.sessions.assemble import assemble_session
    from llm_lens.core.sessions.format import session_from_run
    from llm_lens.core.sessions.read import load_session
    from llm_lens.core.sessions.write import save_session

    store, history = RunStore(), RunHistory()
    root = tiny_engine.start(tiny_engine.tokenize("hello", chat=False), GREEDY, RunConfig(4))
    root.run_all()
    root.run_id = 1
    history.add_root(store, root)
    forced = int(root.steps[1].top_ids[1])
    growth = history.grow(tiny_engine, store, 1, 1, forced, 3, new_id=2)
    branch_steps = list(growth)
    assert [s.index for s in branch_steps] == [2, 3, 4]  # numbered along the path
    path = history.paths[2]
    assert path.steps[1].token.id == forced
    assert path.steps[0].token.id == root.steps[0].token.id and path.steps[0].run_id == 2
    growth = history.grow(tiny_engine, store, 2, None, None, 2, new_id=3)  # continue it
    list(growth)
    assert [n.run_id for n in history.nodes()] == [1, 2, 3]
    assert set(store.kept) == {1, 2, 3}

    info = tiny_engine.info

    def make(run, label=None, parent=None):
        return session_from_run(run, info, label, parent)

    session = assemble_session(info, history, store, 3, make)
    save_session(tmp_path / "tree.llmlens", session)
    runs = load_session(tmp_path / "tree.llmlens").runs
    assert [r.run_id for r in runs] == [1, 2, 3] and runs[0].parent is None
    assert runs[1].parent == (1, 1) and runs[2].parent == (2, len(path.steps) - 1)
    assert [s.token.id for s in runs[2].steps][: len(path.steps)] == [
        s.token.id for s in path.steps
    ]
