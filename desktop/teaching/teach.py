"""Everything issue 16 adds to a window, installed in one call: the shared token selection's
marks and gestures, hover readouts, a card in every pane, tooltips, legends and units."""

from __future__ import annotations

from typing import Any


def teach(window: Any) -> None:
    from llm_lens.desktop.teaching.cards import install_cards
    from llm_lens.desktop.teaching.guide import add_legends, apply_tooltips
    from llm_lens.desktop.teaching.hover import install_hover
    from llm_lens.desktop.teaching.linking import link_panes

    link_panes(window.panes, window.controller)
    install_hover(window.panes, window.controller)
    window.cards = install_cards(window.panes, window.controller)
    apply_tooltips(window)
    add_legends(window.panes)
