"""The window's history: every live run is kept (with its branches) up to a limit, shown in the
Branches view, shown again in the panes on a click, and saved with the session."""

from __future__ import annotations

from llm_lens.core.sampling import GREEDY


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
