"""The Sampling and Logits cards say what the controls and the selected step say, after every
change: a slider moved, a box edited, another step selected (the Sampling card was one change
behind: at top-k 3 it named a draw outside the top 3)."""

from __future__ import annotations

import pytest

from llm_lens.core import cards as ex
from llm_lens.core.sampling import GREEDY

pytestmark = pytest.mark.slow


def expected_cards(ctl) -> dict[str, ex.Explainer]:
    """The cards the settings the controls hold and the selected step call for."""
    step, params = ctl.current_step(), ctl.params
    same = params == ctl.run_params
    return {
        "Sampling": ex.sampling_card(step, params, same)[0],
        "Logits": ex.logits_card(step, params, same),
    }


def assert_cards_agree(qtbot, win, what: str) -> None:
    ctl = win.controller
    sampling = win.panes["Sampling"]
    assert sampling.controls.read() == ctl.params, what

    def agree() -> None:
        for title, wanted in expected_cards(ctl).items():
            card = win.panes[title].card
            assert card.headline.text() == wanted.headline, f"{title} card after {what}"
            assert card.explainer.numbers == wanted.numbers, f"{title} card after {what}"

    qtbot.waitUntil(agree, timeout=5000)
    kept = {v.name: v.kept for v in sampling.views}  # the stages drawn beside the card
    for line in win.panes["Sampling"].card.explainer.numbers:
        stage, count = line.removeprefix("after ").split(": ")
        assert int(count.split()[0].replace(",", "")) == kept[stage], f"{line} after {what}"


def test_sampling_and_logits_cards_follow_every_change(qtbot, loaded_window):
    win = loaded_window
    ctl = win.controller
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run("Explain transformers like I am 12", True, GREEDY, 6)
    controls = win.panes["Sampling"].controls
    win.docks["Sampling"].raise_()
    assert_cards_agree(qtbot, win, "the run")
    changes = [
        ("greedy off", lambda: controls.greedy.setChecked(False)),
        ("temperature slider 1.5", lambda: controls.temp_slider.setValue(150)),
        ("seed 0", lambda: controls.seed.setValue(0)),
        ("step 2", lambda: ctl.request_select(2)),
        ("top-k 3", lambda: controls.top_k.setValue(3)),
        ("top-p 0.5", lambda: controls.top_p.setValue(0.5)),
        ("step 4", lambda: ctl.request_select(4)),
        ("temperature 0", lambda: controls.temperature.setValue(0.0)),
        ("top-k off", lambda: controls.top_k.setValue(0)),
        ("temperature 0.7", lambda: controls.temperature.setValue(0.7)),
        ("step 0", lambda: ctl.request_select(0)),
    ]
    for what, change in changes:
        change()
        assert_cards_agree(qtbot, win, what)
    assert ctl.params.top_k == 0 and ctl.params.temperature == pytest.approx(0.7)


def test_a_top_k_draw_is_among_the_top_k(qtbot, loaded_window):
    win = loaded_window
    ctl = win.controller
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run("Explain transformers like I am 12", True, GREEDY, 4)
    controls = win.panes["Sampling"].controls
    controls.greedy.setChecked(False)
    controls.temperature.setValue(1.5)
    controls.seed.setValue(0)
    controls.top_k.setValue(3)
    step = ctl.current_step()
    top3 = {int(i) for i in step.top_ids[:3]}
    draw = win.panes["Sampling"].draw
    assert draw is not None and draw.token_id in top3
    assert f"(id {draw.token_id}," in win.panes["Sampling"].card.headline.text()
