"""One selected token, reflected in every pane, and the gestures that select it.

:func:`link_panes` asks each pane to add its own marks and gestures
(:meth:`Pane.install_marks`), then moves them (:meth:`Pane.mark_token`) after each of its renders
and whenever the controller's selected token (``controller.token``) moves. What a mark shows is
kept in ``pane.linked`` (a dict of the highlighted data) so tests read data, not pixels.
"""

from __future__ import annotations

from collections.abc import Mapping

from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.pane import Pane


def link_panes(panes: Mapping[str, Pane], controller: Controller) -> None:
    """Install the selection marks and gestures on every pane that shows tokens."""
    for pane in panes.values():
        pane.linked = {}
        if not pane.install_marks():
            continue

        def reflect(pane: Pane = pane) -> None:
            pane.mark_token(controller.token)

        pane.after_render.append(reflect)
        controller.sig_token_selected.connect(lambda _p, r=reflect: r())
