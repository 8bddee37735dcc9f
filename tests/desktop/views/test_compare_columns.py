"""Compare columns clean and with the What-if changes, on the real model: each column's tokens
equal a separate clean or intervened run, its header says which, and a head turned off reads the
prompt itself."""

from __future__ import annotations

from llm_lens.core.interventions import HeadEdit, ResidualAdd
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from tests.desktop.views.conftest import PROMPT
from tests.desktop.views.test_compare_view import _finish_compare

HEAD_OFF = HeadEdit(3, 1, "scale", 0.0)


def _greedy_rows(view, ticked):
    while len(view.rows) > 2:
        view.rows[-1].remove.click()
    for row, tick in zip(view.rows, ticked, strict=True):
        row.set_preset("greedy")
        row.whatif.setChecked(tick)
    view.max_tokens.setValue(4)


def test_a_clean_and_an_intervened_column_equal_separate_runs(qtbot, window, engine):
    ctl = window.controller
    ctl.whatif.add(HEAD_OFF)
    view = window.open_compare()
    _greedy_rows(view, [False, True])
    _finish_compare(qtbot, window, view)
    prompt = engine.tokenize(PROMPT)
    config = RunConfig(max_new_tokens=4)
    clean = engine.start(prompt, GREEDY, config).run_all()
    changed = engine.start(prompt, GREEDY, config, interventions=[HEAD_OFF]).run_all()
    got = [[s.token.id for s in col] for col in ctl.compare.columns]
    assert got == [[s.token.id for s in clean], [s.token.id for s in changed]]
    assert ctl.compare.columns[1][0].logits.tolist() != ctl.compare.columns[0][0].logits.tolist()
    assert view.columns[0].header.text().endswith("· clean")
    assert "intervened: head 3.1 = 0 (own prefill" in view.columns[1].header.text()
    assert "1 column(s) read the prompt under their own changes" in view.info.text()
    assert view.info.minimumSizeHint().width() < 400  # the long line wraps, never widens the view
    view.columns[1].show_button.click()
    assert ctl.interventions == (HEAD_OFF,)  # the panes mark the shown column's run


def test_a_change_after_the_prompt_shares_the_prefill(qtbot, window, engine):
    ctl = window.controller
    prompt = engine.tokenize(PROMPT)
    push = ResidualAdd(5, (len(prompt) + 1,), tuple([2.0] * engine.model.config.hidden_size))
    ctl.whatif.add(push)
    view = window.open_compare()
    _greedy_rows(view, [True, False])
    _finish_compare(qtbot, window, view)
    assert "(shared prefill)" in view.columns[0].header.text()
    assert ctl.compare.start.own_prefill == (False, False)
    cols = ctl.compare.columns
    assert cols[0][0].logits.tolist() == cols[1][0].logits.tolist()  # one prefill, both columns


def test_a_ticked_column_with_no_change_is_an_inline_message(qtbot, window):
    view = window.open_compare()
    view.rows[0].whatif.setChecked(True)
    view.run()
    assert view.error.isVisible() and "no change switched on" in view.error.text()
    assert not window.controller.compare.running


def test_a_saved_what_if_column_reopens_marked(qtbot, window, tmp_path):
    from llm_lens.desktop.window.main_window import MainWindow
    from tests.desktop.state.test_compare_controller import _saved

    ctl = window.controller
    ctl.whatif.add(HEAD_OFF)
    view = window.open_compare()
    _greedy_rows(view, [False, True])
    view.rows[0].set_preset("factual")  # two equal settings would reopen as K samples
    _finish_compare(qtbot, window, view)
    path = tmp_path / "whatif-compare.llmlens"
    with _saved(qtbot, ctl, path):
        ctl.sessions.request_save(str(path), with_views=False)

    fresh = MainWindow()  # no model loaded here
    fresh.sessions.confirm_close = False
    qtbot.addWidget(fresh)
    with qtbot.waitSignal(fresh.controller.sig_run_finished, timeout=60_000):
        fresh.sessions.open(str(path))
    start = fresh.controller.compare.start
    assert start.interventions == ((), (HEAD_OFF,)) and start.own_prefill == (False, True)
    reopened = fresh.open_compare()
    assert [c.header.text() for c in reopened.columns] == [c.header.text() for c in view.columns]
    fresh.close()
