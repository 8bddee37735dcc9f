"""desktop.teaching.cards: a card under every pane, filled from the pane's own explainer and
refreshed after its renders, on selection and on settings, as the pane asks."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtWidgets import QVBoxLayout

from llm_lens.core.cards import Explainer
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.teaching.cards import explainer_of, install_cards
from llm_lens.desktop.widgets.card import Card
from llm_lens.desktop.widgets.pane import Pane


class _Explaining(Pane):
    title = "Explaining"
    card_follows_token = True

    def __init__(self, controller: Controller) -> None:
        super().__init__(controller)
        QVBoxLayout(self)
        self.calls = 0
        self.fail: type[Exception] | None = None

    def render(self, step):
        pass

    def clear(self):
        pass

    def explainer(self) -> Explainer | None:
        self.calls += 1
        if self.fail is not None:
            raise self.fail("a new run is arriving")
        return Explainer(f"token {self.controller.token}", "what it shows", ("n = 1",))


def test_a_card_shows_the_panes_explainer_and_follows_what_the_pane_asks(qtbot, ctl):
    pane, quiet = _Explaining(ctl), _Explaining(ctl)
    quiet.card_follows_token = False
    for p in (pane, quiet):
        qtbot.addWidget(p)
    cards = install_cards({"Explaining": pane, "Quiet": quiet}, ctl)
    card = cards["Explaining"]
    assert isinstance(card, Card) and pane.card is card and pane.layout().indexOf(card) >= 0
    assert card.explainer is None  # filled at the first render
    pane.render_and_paint()
    assert card.headline.text() == "token -1" and "n = 1" in card.body.text()
    ctl.show_state(replace(ctl.shown, token=4))
    ctl.sig_token_selected.emit(4)
    assert card.headline.text() == "token 4"
    assert quiet.calls == 0  # its card does not follow the token: only its renders refresh it
    ctl.sig_params_changed.emit(ctl.params)
    assert quiet.calls == 0


def test_explainer_of_is_none_while_a_new_run_arrives(qtbot, ctl):
    pane = _Explaining(ctl)
    qtbot.addWidget(pane)
    assert explainer_of(pane).headline == "token -1"
    for error in (IndexError, ValueError, KeyError):
        pane.fail = error
        assert explainer_of(pane) is None
    pane.fail = RuntimeError  # anything else is a bug: it is not swallowed
    with pytest.raises(RuntimeError):
        explainer_of(pane)


def test_a_pane_explains_nothing_by_default(qtbot, ctl):
    class Bare(_Explaining):
        explainer = Pane.explainer

    pane = Bare(ctl)
    qtbot.addWidget(pane)
    card = install_cards({"Bare": pane}, ctl)["Bare"]
    pane.render_and_paint()
    assert card.explainer is None and card.headline.text() == ""
