"""The Beam view on the real model: the best beam equals core's beam search; the last step
lists the finished beams best first."""

from __future__ import annotations

import pytest

from tests.desktop.views.conftest import PROMPT


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


def test_a_cell_shows_line_breaks_and_a_finished_search_score():
    from llm_lens.desktop.views.beam_view import DONE_SCORE, one_line, score_text

    assert one_line("a\nb\n") == "a↵b↵"
    assert score_text(-1.23456) == "-1.235"
    assert score_text(-1e9) == "— (search done)" and score_text(DONE_SCORE) == "— (search done)"
    assert score_text(-9.9e7) == "-99000000.000"


def test_a_beam_view_lists_a_steps_beams_and_their_candidates(qtbot, bare):
    """Fed a search's frames as the controller relays them: the live table is the step's beams
    best first, the candidates table each continuation with its fate, pruned ones grey; the
    slider follows the newest step and replays an earlier one."""
    from llm_lens.core.runs.beam import BeamCandidate, BeamStep
    from llm_lens.core.runs.jobs import BeamFrame
    from llm_lens.desktop.views.beam_view import GREY, LIVE_TITLE, BeamView

    view = BeamView(bare, lambda: ("the cat", False))
    qtbot.addWidget(view)

    def frame(index, texts, scores, candidates):
        step = BeamStep(index, ((1,),) * len(texts), scores, (0,) * len(texts), candidates, (), 1.0)
        return BeamFrame(step, texts)

    first = frame(
        0,
        (" sat", " ran"),
        (-0.5, -1.25),
        (
            BeamCandidate(0, 5, " sat", -0.5, "live"),
            BeamCandidate(0, 6, " ran", -1.25, "live"),
            BeamCandidate(0, 7, "\n", -3.0, "pruned"),
        ),
    )
    second = frame(
        1, (" sat on", " sat in"), (-0.9, -1e9), (BeamCandidate(0, 8, " on", -0.9, "live"),)
    )
    bare.compare.sig_beam_started.emit(None)
    assert view.best.text() == "searching…"
    for f in (first, second):
        bare.compare.beam_frames.append(f)
        bare.compare.sig_beam_step.emit(f)
    assert view.slider.maximum() == 1 and view.slider.value() == 1
    assert view.step_label.text() == "1 / 1"
    cells = [[view.live.item(r, c).text() for c in range(4)] for r in range(view.live.rowCount())]
    assert cells == [["0", " sat on", "-0.900", "beam 0"]]  # the −1e9 slot is not live
    assert view.candidates.item(0, 1).text() == " sat on"  # the beam's text, then the token
    view.slider.setValue(0)
    assert view.live_title.text() == LIVE_TITLE and view.live.rowCount() == 2
    assert view.live.item(1, 2).text() == "-1.250"
    fates = [view.candidates.item(r, 3).text() for r in range(3)]
    assert fates == ["live", "live", "pruned"]
    assert view.candidates.item(2, 1).text() == "↵"
    assert view.candidates.item(2, 1).foreground().color() == GREY
    assert view.candidates.item(0, 1).foreground().color() != GREY
