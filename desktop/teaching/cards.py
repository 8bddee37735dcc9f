"""A "how to read this" card under every pane, filled with the selected step's numbers.

The card's headline (one sentence with the live numbers) is always shown; the rest (what the
picture shows, more numbers, the phenomena present, one thing to try) folds away. The words come
from :mod:`llm_lens.core.cards`; each pane gathers its own state for them
(:meth:`Pane.explainer`), and this module only places and refreshes the cards.
"""

from __future__ import annotations

from collections.abc import Mapping

from llm_lens.core import cards as ex
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.card import BODY_MAX, Card
from llm_lens.desktop.widgets.pane import Pane

__all__ = ["BODY_MAX", "Card", "explainer_of", "install_cards"]


def explainer_of(pane: Pane) -> ex.Explainer | None:
    """The card text of ``pane`` now (None when it has nothing to explain yet, or the shown
    run's engine does not provide what it draws: its note says so)."""
    if pane.missing_line():
        return None
    try:
        return pane.explainer()
    except (IndexError, ValueError, KeyError):  # a new run is arriving: the next render fixes it
        return None


def install_cards(panes: Mapping[str, Pane], controller: Controller) -> dict[str, Card]:
    """A card at the bottom of every pane, refreshed after its renders (a new run's clearing
    render included), on token selection (panes whose card follows the token) and when the
    settings move (panes whose card follows them)."""
    cards = {}
    for title, pane in panes.items():
        card = Card(pane)
        pane.attach_card(card)

        def refresh(pane: Pane = pane, card: Card = card) -> None:
            before_run = bool(pane.empty_text) and controller.current_step() is None
            card.show_explainer(explainer_of(pane), before_run=before_run)

        if pane.empty_text:  # before any run the card says what it will hold, not a bare ▸
            card.show_explainer(None, before_run=True)
        pane.after_render.append(refresh)
        if pane.card_follows_token:
            controller.sig_token_selected.connect(lambda _p, r=refresh: r())
        if pane.card_follows_params:
            controller.sig_params_changed.connect(lambda _p, r=refresh: r())
        # no clearing on sig_run_started: each pane's own clearing unit refreshes its card (12
        # cards emptied at once re-laid out and repainted the whole window in one 50 ms turn)
        cards[title] = card
    return cards
