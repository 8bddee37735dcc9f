"""The Beam view on the real model: the best beam equals core's beam search; the last step
lists the finished beams best first."""

from __future__ import annotations

import pytest

PROMPT = "Explain transformers like I am 12"


@pytest.fixture
def window(loaded_window):
    loaded_window.prompt_panel.editor.setPlainText(PROMPT)
    loaded_window.prompt_panel.chat_box.setChecked(True)
    return loaded_window


def test_beam_view_best_beam_equals_core(qtbot, window, engine):
    from llm_lens.core.runs.beam import beam_search
    from llm_lens.desktop.views.beam_view import GREY

    view = window.open_beam()
    view.beams.setValue(3)
    view.max_tokens.setValue(5)
    with qtbot.waitSignal(window.controller.compare.sig_beam_finished, timeout=120_000) as b:
        view.run_button.click()
    result = b.args[0]
    reference = beam_search(engine, engine.tokenize(PROMPT), 3, 5)
    assert result.token_ids == reference.token_ids
    assert result.score == pytest.approx(reference.score, abs=1e-4)
    assert repr(reference.text) in view.best.text()
    assert view.slider.maximum() == len(reference.steps) - 1
    view.slider.setValue(0)
    assert view.live.rowCount() == 3 and view.candidates.rowCount() == 6
    fates = [view.candidates.item(r, 3).text() for r in range(6)]
    assert fates == [c.fate for c in reference.steps[0].candidates]
    pruned = fates.index("pruned")
    assert view.candidates.item(pruned, 1).foreground().color() == GREY


def test_beam_search_last_step_shows_the_finished_beams_best_first(qtbot, loaded_window):
    from llm_lens.desktop.views.beam_view import DONE_TITLE, one_line

    win = loaded_window
    win.prompt_panel.editor.setPlainText(PROMPT)
    view = win.open_beam()
    view.beams.setValue(3)
    view.max_tokens.setValue(5)
    with qtbot.waitSignal(win.controller.compare.sig_beam_finished, timeout=120_000) as b:
        view.run_button.click()
    result = b.args[0]
    view.slider.setValue(view.slider.maximum())
    view.show_step(view.slider.maximum())
    assert view.live_title.text() == DONE_TITLE
    live = [view.live.item(r, 1).text() for r in range(view.live.rowCount())]
    scores = [view.live.item(r, 2).text() for r in range(view.live.rowCount())]
    assert live and live[0] == one_line(result.text)
    assert float(scores[0]) == pytest.approx(result.score, abs=1e-3)
    assert not any("search done" in s for s in scores)
    stopped = {
        view.candidates.item(r, 1).text()
        for r in range(view.candidates.rowCount())
        if view.candidates.item(r, 3).text() == "stopped"
    }
    assert not stopped & set(live)
    view.slider.setValue(0)  # an earlier step lists the live beams again
    assert view.live_title.text().startswith("Live beams")
