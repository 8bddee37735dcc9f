"""The Branches view: branching at a step with the tree, and the window's history (every live
run kept with its branches up to a limit, shown again in the panes on a click, saved)."""

from __future__ import annotations

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from tests.desktop.views.conftest import PROMPT


def test_branch_at_step_two_with_the_second_alternative(qtbot, window, engine):
    from llm_lens.core.runs.branching import extend_prompt

    ctl = window.controller
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run(PROMPT, True, GREEDY, 6)
    original = [s.token.id for s in ctl.steps]
    ctl.request_select(2)
    view = window.open_branch()
    alt = view.alternatives[1]
    assert not alt.chosen and alt.token_id != original[2] and alt.prob > 0
    view.table.selectRow(1)
    view.max_tokens.setValue(4)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        view.branch_button.click()
    branched = [s.token.id for s in ctl.steps]
    assert branched[:2] == original[:2] and branched[2] == alt.token_id
    assert [s.index for s in ctl.steps] == list(range(len(ctl.steps)))
    fresh = extend_prompt(engine, engine.tokenize(PROMPT), [*original[:2], alt.token_id])
    expected = engine.start(fresh, GREEDY, RunConfig(max_new_tokens=4)).run_all()
    assert branched[3:] == [s.token.id for s in expected]  # the cropped cache reads the same

    qtbot.waitUntil(lambda: len(ctl.compare.nodes) == 2, timeout=5000)
    root = view.tree.topLevelItem(0)
    assert view.tree.topLevelItemCount() == 1 and root.childCount() == 1
    assert root.child(0).text(1) == "step 2" and view.tree.currentItem() is root.child(0)
    view.tree.setCurrentItem(root)
    assert [s.token.id for s in ctl.steps] == original
    view.tree.setCurrentItem(root.child(0))
    assert [s.token.id for s in ctl.steps] == branched


def test_every_live_run_is_kept_shown_again_and_saved(qtbot, loaded_window, tmp_path):
    from llm_lens.core.sessions.read import load_session

    win, ctl = loaded_window, loaded_window.controller
    prompts = ["Explain transformers like I am 12", "What is a KV cache?"]
    runs = []
    autosave = ctl.sessions.autosave_path()
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
        ctl.sessions.request_save(str(path), with_views=False)
    session = load_session(path)
    assert [r.prompt.text for r in session.runs] == prompts
    assert all(r.parent is None for r in session.runs) and session.shown_index == 0
