"""Continue in the window: a live run goes on exactly as a longer run would; the branch tree is
saved whole; a reopened run with its model loaded is revived, continued and branched."""

from __future__ import annotations

import dataclasses

import pytest

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import SamplingParams

PROMPT = "Explain transformers like I am 12"
SAMPLED = SamplingParams(temperature=1.3, top_k=0, top_p=1.0, seed=7)


@pytest.fixture
def window(loaded_window):
    return loaded_window


def _ids(steps):
    return [s.token.id for s in steps]


def _reference(engine, n):
    run = engine.start(engine.tokenize(PROMPT), SAMPLED, RunConfig(max_new_tokens=n))
    return _ids(run.run_all())


def _run(qtbot, win, n):
    ctl = win.controller
    with qtbot.waitSignals([ctl.sig_run_finished, ctl.compare.sig_tree_changed], timeout=120_000):
        ctl.request_run(PROMPT, True, SAMPLED, n)  # the tree changes: the run joins the history


def _continue(qtbot, win, n):
    panel = win.prompt_panel
    panel.max_tokens.setValue(n)
    qtbot.waitUntil(panel.continue_button.isEnabled, timeout=10_000)
    ctl = win.controller
    before = len(ctl.compare.nodes)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        panel.continue_button.click()
    qtbot.waitUntil(lambda: len(ctl.compare.nodes) > before, timeout=10_000)


def _saved(qtbot, ctl, path):
    return qtbot.waitSignal(
        ctl.sig_saved, timeout=120_000, check_params_cb=lambda p, _size: p == str(path)
    )


def test_continue_goes_on_like_a_longer_run_and_the_tree_is_saved(qtbot, window, engine,
                                                                  tmp_path):  # fmt: skip
    from llm_lens.core.sessions.read import load_session

    ctl = window.controller
    _run(qtbot, window, 4)
    first = _ids(ctl.steps)
    _continue(qtbot, window, 4)
    assert _ids(ctl.steps) == _reference(engine, 8)
    assert _ids(ctl.steps)[:4] == first and ctl.summary.finish_reason == "length"
    nodes = ctl.compare.nodes
    assert [n.depth for n in nodes] == [0, 1] and nodes[1].continued
    assert nodes[1].offset == 4  # the root's 4 steps come before the continuation's own

    path = tmp_path / "tree.llmlens"
    said: list[dict[str, int]] = []  # shown in the save dialog's body, before writing
    ctl.sessions.sig_save_estimate.connect(lambda _path, sizes: said.append(sizes))
    with _saved(qtbot, ctl, path):
        ctl.sessions.request_save(str(path), with_views=False)
    session = load_session(path)
    assert said and abs(said[-1]["total"] / path.stat().st_size - 1) < 0.1
    root, grown = session.runs
    assert root.parent is None and grown.parent == (root.run_id, 3)
    assert _ids(root.steps) == first and _ids(grown.steps) == _ids(ctl.steps)
    assert session.shown_index == 1 and grown.generator_state is not None


def test_a_reopened_run_is_revived_continued_and_branched(qtbot, window, engine, tmp_path):
    ctl = window.controller
    _run(qtbot, window, 4)
    _continue(qtbot, window, 2)
    path = tmp_path / "tree.llmlens"
    with _saved(qtbot, ctl, path):
        ctl.sessions.request_save(str(path), with_views=False)
    window.prompt_panel.editor.setPlainText("something else")

    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        window.sessions.open(str(path))
    assert ctl.recorded is not None and ctl.session_index == 1 and len(ctl.steps) == 6
    assert window.prompt_panel.editor.toPlainText() == PROMPT  # Run and Compare read it again
    view = window.open_branch()
    assert view.tree.topLevelItemCount() == 1 and view.tree.topLevelItem(0).childCount() == 1
    assert "(continued)" in view.tree.topLevelItem(0).child(0).text(2)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        view.tree.setCurrentItem(view.tree.topLevelItem(0))  # the saved root
    assert ctl.session_index == 0 and len(ctl.steps) == 4

    with qtbot.waitSignal(ctl.compare.sig_revived, timeout=60_000) as revived:
        _continue(qtbot, window, 4)
    diff, scale, matches = revived.args
    assert matches and diff < 1e-4 * scale
    assert "matches the recording" in window.statusBar().currentMessage()
    assert "the file's other 1 run is saved" in window.statusBar().currentMessage()
    assert ctl.recorded is None and _ids(ctl.steps) == _reference(engine, 8)

    ctl.request_select(2)
    view.refresh()
    alt = next(a for a in view.alternatives if not a.chosen)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        view.branch_button.click()
    assert ctl.steps[2].token.id == alt.token_id and 3 < len(ctl.steps) <= 3 + 16
    assert _ids(ctl.steps)[:2] == _reference(engine, 2)

    from llm_lens.core.sessions.read import load_session

    again = tmp_path / "again.llmlens"  # nothing of the reopened file is lost
    with _saved(qtbot, ctl, again):
        ctl.sessions.request_save(str(again), with_views=False)
    runs = load_session(again).runs  # the file's other run, then the history (2 trees)
    by_id = {r.run_id: r for r in runs}
    assert len(runs) == 6 and len(by_id) == 6
    old_continuation = runs[0]
    root = by_id[old_continuation.parent[0]]  # its parent is the revived root now
    assert root.parent is None and len(root.steps) == 4 and old_continuation.parent[1] == 3
    assert _ids(old_continuation.steps)[:4] == _ids(root.steps)
    grown = [r for r in runs if r.parent is not None and r.parent[0] == root.run_id]
    assert len(grown) == 3  # the file's continuation, the new one and the branch

    listed = [view.tree.topLevelItem(i) for i in range(view.tree.topLevelItemCount())]
    assert len(listed) == 3  # two live trees, then the file's other run
    name = listed[-1].text(0)
    assert name.endswith("(recorded)") and not listed[0].text(0).endswith("(recorded)")
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=10_000):
        view.tree.setCurrentItem(listed[-1])
    assert ctl.recorded is not None and _ids(ctl.steps) == _ids(old_continuation.steps)
    assert view.tree.currentItem().text(0) == name  # the tree is rebuilt, the run stays current
    _continue(qtbot, window, 2)  # the file's last run revived too: three live trees now
    assert view.tree.topLevelItemCount() == 3 and ctl.recorded is None and len(ctl.steps) == 8


def test_a_run_of_another_model_cannot_be_continued(qtbot, window, tmp_path):
    from llm_lens.core.sessions.read import load_session
    from llm_lens.core.sessions.write import save_session

    ctl = window.controller
    _run(qtbot, window, 3)
    path, other = tmp_path / "mine.llmlens", tmp_path / "other.llmlens"
    with _saved(qtbot, ctl, path):
        ctl.sessions.request_save(str(path), with_views=False)
    session = load_session(path)
    model = dict(session.model, weights_id="0" * 16, name="another-model")
    save_session(other, dataclasses.replace(session, model=model))

    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        window.sessions.open(str(other))
    window.prompt_panel.max_tokens.setValue(2)
    window.prompt_panel.continue_button.click()
    error = window.prompt_panel.error
    assert error.isVisibleTo(window) and "load that model" in error.text()
    assert "another-model" in error.text() and ctl.recorded is not None and len(ctl.steps) == 3


def test_a_comparison_is_saved_and_reopens_without_the_model(qtbot, window, tmp_path):
    from llm_lens.desktop.window.main_window import MainWindow

    ctl = window.controller
    window.prompt_panel.editor.setPlainText(PROMPT)
    view = window.open_compare()
    view.max_tokens.setValue(4)
    with qtbot.waitSignal(ctl.compare.sig_compare_finished, timeout=120_000) as done:
        view.run_button.click()
    live = [_ids(c) for c in ctl.compare.columns]
    path = tmp_path / "compare.llmlens"
    with _saved(qtbot, ctl, path):
        ctl.sessions.request_save(str(path), with_views=False)

    fresh = MainWindow()  # no model loaded here
    fresh.sessions.confirm_close = False
    qtbot.addWidget(fresh)
    other = fresh.controller
    with qtbot.waitSignal(other.sig_run_finished, timeout=60_000):
        fresh.sessions.open(str(path))
    assert [_ids(c) for c in other.compare.columns] == live
    outcome = other.compare.outcome
    # recomputed from the file's logits: float16 with the top 50 exact (session format 2)
    assert outcome.kl_per_step == pytest.approx(done.args[0].kl_per_step, rel=1e-4)
    assert outcome.divergence_step == done.args[0].divergence_step
    reopened = fresh.open_compare()
    assert len(reopened.columns) == 3 and reopened.columns[2].show_button.isEnabled()
    assert reopened.columns[0].header.text() == view.columns[0].header.text()
    with qtbot.waitSignal(other.sig_run_finished, timeout=10_000):
        reopened.columns[2].show_button.click()
    assert other.recorded is not None and _ids(other.steps) == live[2]
    fresh.close()


def test_a_stopped_continuation_can_go_on_again(qtbot, window, engine):
    ctl = window.controller
    _run(qtbot, window, 3)
    window.prompt_panel.max_tokens.setValue(200)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000) as finished:
        window.prompt_panel.continue_button.click()
        qtbot.waitUntil(lambda: len(ctl.steps) >= 6, timeout=60_000)
        ctl.request_stop()
    assert finished.args[0].finish_reason == "cancelled" and len(ctl.steps) < 3 + 200
    qtbot.waitUntil(lambda: len(ctl.compare.nodes) == 2, timeout=10_000)
    n = len(ctl.steps)
    _continue(qtbot, window, 2)
    assert _ids(ctl.steps) == _reference(engine, n + 2)
    assert [node.depth for node in ctl.compare.nodes] == [0, 1, 2]


def test_views_a_file_lacks_say_which_model_computes_them(qtbot, window, tmp_path):
    from llm_lens.desktop.window.main_window import MainWindow

    ctl = window.controller
    _run(qtbot, window, 3)
    path = tmp_path / "bare.llmlens"  # as autosave writes it: no lens, no projection
    with _saved(qtbot, ctl, path):
        ctl.sessions.request_save(str(path), with_views=False)
    fresh = MainWindow()  # no model loaded here
    fresh.sessions.confirm_close = False
    qtbot.addWidget(fresh)
    fresh.show()
    with qtbot.waitSignal(fresh.controller.sig_run_finished, timeout=60_000):
        fresh.sessions.open(str(path))
    layers, embeddings = fresh.panes["Layer stack"], fresh.panes["Embeddings"]
    expected = "not in this session file: load SmolLM2-135M-Instruct to compute it"
    qtbot.waitUntil(lambda: expected in layers.lens_status.text(), timeout=10_000)
    qtbot.waitUntil(lambda: expected in embeddings.explained.text(), timeout=10_000)
    assert "logit lens" in layers.lens_status.text()
    fresh.close()


def test_continue_and_branch_say_why_they_cannot_run(qtbot, bare):
    errors: list[tuple[str, str]] = []
    bare.compare.sig_error.connect(lambda where, message: errors.append((where, message)))
    bare.compare.request_continue(3)
    bare.compare.request_branch(0, 1, 3)
    bare.compare.request_beam("hi", False, 2, 3)
    assert errors == [
        ("continue", "no model is loaded yet"),
        ("branch", "no model is loaded yet"),
        ("beam", "no model is loaded yet"),
    ]
    assert bare.compare.alternatives(5) == []  # no step shown


def test_a_tiny_run_continues_and_branches_into_the_tree(qtbot, tiny_ctl):
    from tests.desktop.state.conftest import run

    compare = tiny_ctl.compare
    run(qtbot, tiny_ctl, tokens=3)
    original = _ids(tiny_ctl.steps)
    errors: list[tuple[str, str]] = []
    compare.sig_error.connect(lambda where, message: errors.append((where, message)))
    compare.request_branch(7, 1, 2)
    assert errors == [("branch", "select a step of a run first")]
    with qtbot.waitSignal(tiny_ctl.sig_run_finished, timeout=60_000):
        compare.request_continue(2)
    assert _ids(tiny_ctl.steps)[:3] == original and len(tiny_ctl.steps) == 5
    tiny_ctl.request_select(1)
    alts = compare.alternatives(3)
    assert len(alts) == 3 and alts[0].token_id == original[1]  # greedy: the top one was chosen
    with qtbot.waitSignal(tiny_ctl.sig_run_finished, timeout=60_000):
        compare.request_branch(1, alts[1].token_id, 2)
    branched = _ids(tiny_ctl.steps)
    assert branched[:1] == original[:1] and branched[1] == alts[1].token_id
    qtbot.waitUntil(lambda: len(compare.nodes) == 3, timeout=5000)
