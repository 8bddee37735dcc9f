"""The window's history: every live run is kept (with its branches) up to a limit, shown in the
Branches view, shown again in the panes on a click, and saved with the session."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from llm_lens.desktop import compare_jobs
from llm_lens.desktop.compare_jobs import BranchBook


def test_the_book_lets_the_oldest_runs_go(tiny_engine, monkeypatch):
    monkeypatch.setattr(compare_jobs, "MAX_ROOTS", 2)
    worker = SimpleNamespace(runs={}, kept_runs={}, engine=tiny_engine, cancel=threading.Event())
    book = BranchBook()
    for run_id in (1, 2, 3):
        run = tiny_engine.start(tiny_engine.tokenize("hi", chat=False), GREEDY, RunConfig(2))
        run.run_all()
        run.run_id = run_id
        shown, nodes = book.add_history(worker, run)
        assert shown.run_id == run_id and shown.steps == tuple(run.steps)
    assert [n.run_id for n in nodes] == [2, 3] and all(n.prompt == "hi" for n in nodes)
    assert set(worker.kept_runs) == {2, 3} and set(worker.runs) == {2, 3}
    assert not book.holds(1) and book.holds(3)


def test_every_live_run_is_kept_shown_again_and_saved(qtbot, loaded_window, tmp_path):
    from llm_lens.core.sessions.read import load_session

    win, ctl = loaded_window, loaded_window.controller
    prompts = ["Explain transformers like I am 12", "What is a KV cache?"]
    runs = []
    autosave = ctl._autosave_path()
    for text in prompts:
        signals = [ctl.sig_run_finished, ctl.compare.sig_tree_changed, ctl.sig_saved]
        saved = [None, None, lambda p, _s: p == autosave]
        with qtbot.waitSignals(signals, timeout=120_000, check_params_cbs=saved):
            ctl.request_run(text, True, GREEDY, 3)
        runs.append((ctl.run_id, [s.token.id for s in ctl.steps]))
    assert [r.prompt.text for r in load_session(autosave).runs] == prompts[1:]  # kept quick
    view = win.open_branch()
    tree = view.tree
    assert tree.topLevelItemCount() == 2
    assert "What is a KV cache?" in tree.topLevelItem(1).text(1)
    assert tree.currentItem() is tree.topLevelItem(1)  # the shown run

    with qtbot.waitSignal(ctl.sig_run_finished, timeout=10_000):
        tree.setCurrentItem(tree.topLevelItem(0))
    assert ctl.run_id == runs[0][0] and [s.token.id for s in ctl.steps] == runs[0][1]
    assert ctl.prompt.text == prompts[0]
    from tests.desktop.conftest import wait_result

    assert wait_result(qtbot, ctl, "lens", step=1, k=5) is not None  # it answers analyses again

    path = tmp_path / "history.llmlens"
    with qtbot.waitSignal(ctl.sig_saved, timeout=120_000,
                          check_params_cb=lambda p, _s: p == str(path)):  # fmt: skip
        ctl.request_save_session(str(path), with_views=False)
    session = load_session(path)
    assert [r.prompt.text for r in session.runs] == prompts
    assert all(r.parent is None for r in session.runs) and session.shown_index == 0


def test_the_book_holds_a_bounded_number_of_bytes(tiny_engine, monkeypatch):
    from llm_lens.desktop.compare_jobs import held_bytes

    worker = SimpleNamespace(runs={}, kept_runs={}, engine=tiny_engine, cancel=threading.Event())
    book = BranchBook()
    runs = []
    for run_id in (1, 2, 3):
        run = tiny_engine.start(tiny_engine.tokenize("hello", chat=False), GREEDY, RunConfig(3))
        run.run_all()
        run.run_id = run_id
        runs.append(run)
    one = held_bytes(runs[0])
    assert one >= runs[0].prefill.hidden.nbytes + sum(s.logits.nbytes for s in runs[0].steps)
    monkeypatch.setattr(compare_jobs, "MAX_HISTORY_BYTES", 2 * one + one // 2)
    for run in runs:
        book.add_history(worker, run)
    assert set(book.trees) == {2, 3}  # three would hold more than the limit
    monkeypatch.setattr(compare_jobs, "MAX_HISTORY_BYTES", 1)
    book._trim(worker)
    assert set(book.trees) == {3}  # the newest run is always kept
