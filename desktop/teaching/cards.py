"""A "how to read this" card under every pane, filled with the selected step's numbers.

The card's headline (one sentence with the live numbers) is always shown; the rest (what the
picture shows, more numbers, the phenomena present, one thing to try) folds away. The words come
from :mod:`llm_lens.core.explain_text`; this module only gathers each pane's state for them.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core import cards as ex
from llm_lens.desktop.state.selection import context_tokens, selected_token

TOKEN_CARDS = ("Tokens", "Embeddings", "Positions", "Attention", "Attention lines", "Experts")
BODY_MAX = 96  # pixels: an open card scrolls rather than crowding out its pane


class Card(QFrame):
    """A collapsible explainer: headline always visible, the body behind a toggle."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.explainer: ex.Explainer | None = None
        self.toggle = QToolButton(checkable=True)
        self.toggle.setToolTip("How to read this: what the picture shows, and one thing to try")
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setAutoRaise(True)
        self.toggle.toggled.connect(self._toggled)
        self.headline = QLabel(wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        self.headline.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.body = QLabel(wordWrap=True, alignment=Qt.AlignmentFlag.AlignTop)
        self.body.setTextFormat(Qt.TextFormat.RichText)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignTop)
        top.addWidget(self.headline, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 1, 4, 1)
        layout.setSpacing(0)
        layout.addLayout(top)
        self.fold = QScrollArea(visible=False, widgetResizable=True, maximumHeight=BODY_MAX)
        self.fold.setFrameShape(QFrame.Shape.NoFrame)
        self.fold.setWidget(self.body)
        layout.addWidget(self.fold)

    def _toggled(self, on: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.fold.setVisible(on)

    def show_explainer(self, explainer: ex.Explainer | None) -> None:
        self.explainer = explainer
        if explainer is None:
            self.headline.setText("")
            self.body.setText("")
            return
        self.headline.setText(explainer.headline)
        parts = [html.escape(explainer.shows)]
        parts += [f"• {html.escape(line)}" for line in explainer.numbers]
        parts += [f"<b>Seen here</b> — {html.escape(line)}" for line in explainer.phenomena]
        if explainer.try_this:
            parts.append(f"<i>Try:</i> {html.escape(explainer.try_this)}")
        self.body.setText("<br>".join(parts))


# ----------------------------------------------------------------- per-pane gatherers
def _tokens(pane: Any, ctl: Any) -> ex.Explainer | None:
    tokens = context_tokens(ctl)
    if not tokens:
        return None
    name = getattr(ctl.info, "name", "The model")
    return ex.tokens_card(
        [t.text for t in tokens], [t.id for t in tokens], len(ctl.prompt), ctl.token, name
    )


def _embeddings(pane: Any, ctl: Any) -> ex.Explainer | None:
    from llm_lens.desktop.teaching.hover import embedding_norm

    proj = pane.projection
    if proj is None:
        return None
    chosen = selected_token(ctl)
    text = tid = xy = norm = None
    if chosen is not None:
        tid, text = chosen[1].id, chosen[1].text
        xy = proj.coords[tid]
        norm = embedding_norm(ctl, tid)
    return ex.embeddings_card(text, tid, xy, norm, proj.explained, len(proj.coords))


def _positions(pane: Any, ctl: Any) -> ex.Explainer | None:
    rope = getattr(pane, "rope", None) if pane.view is not None and pane.view.rope else None
    if rope is None or ctl.info is None:  # learned positions or ALiBi: the pane says which
        return None
    chosen = selected_token(ctl)
    pos, text = (chosen[0], chosen[1].text) if chosen is not None else (0, None)
    return ex.positions_card(rope.theta, rope.inv_freq, pos, text)


def _attention(pane: Any, ctl: Any) -> ex.Explainer | None:
    if pane.matrix.size == 0:
        return None
    tokens = context_tokens(ctl)
    pos = ctl.token if ctl.token >= 0 else len(pane.positions) * pane.block - 1
    return ex.attention_card(
        pane.layer_box.value(),
        pane.head_box.value(),
        pane.matrix,
        pane.block,
        [t.text for t in tokens],
        min(pos, len(tokens) - 1),
    )


def _layers(pane: Any, ctl: Any) -> ex.Explainer | None:
    step = ctl.current_step()
    if step is None:
        return None
    lens = pane._lens if pane._lens_step == step.index else None
    return ex.layers_card(step, lens)


def _experts(pane: Any, ctl: Any) -> ex.Explainer | None:
    step = ctl.current_step()
    if step is None:
        return None
    name = getattr(ctl.info, "name", "This model")
    if step.routing is None or pane.routing is None:
        return ex.experts_card(None, None, name) if step.routing is None else None
    tokens = context_tokens(ctl)
    text = tokens[pane.position].text if 0 <= pane.position < len(tokens) else None
    return ex.experts_card(pane.routing, text, name)


def _kvcache(pane: Any, ctl: Any) -> ex.Explainer | None:
    step = ctl.current_step()
    return None if step is None or ctl.info is None else ex.kvcache_card(ctl.info, step)


def _logits(pane: Any, ctl: Any) -> ex.Explainer | None:
    step = ctl.current_step()
    params = ctl.run_params if ctl.busy else ctl.params  # no re-staging beside a streaming run
    return None if step is None else ex.logits_card(step, params, params == ctl.run_params)


def _sampling(pane: Any, ctl: Any) -> ex.Explainer | None:
    step = ctl.current_step()
    if step is None:
        return None
    params = pane.shown_params
    explainer, draw = ex.sampling_card(step, params, params == ctl.run_params)
    pane.draw = draw
    return explainer


def _timing(pane: Any, ctl: Any) -> ex.Explainer | None:
    return ex.timing_card(ctl.steps, len(ctl.prompt)) if ctl.prompt is not None else None


def _attribution(pane: Any, ctl: Any) -> ex.Explainer | None:
    return ex.attribution_card(pane.result)


GATHERERS = {
    "Tokens": _tokens,
    "Embeddings": _embeddings,
    "Positions": _positions,
    "Attention": _attention,
    "Layer stack": _layers,
    "Experts": _experts,
    "KV cache": _kvcache,
    "Logits": _logits,
    "Sampling": _sampling,
    "Timing": _timing,
    "Why this token?": _attribution,
}


def explainer_of(title: str, pane: Any, controller: Any) -> ex.Explainer | None:
    """The card text of pane ``title`` now (None when it has nothing to explain yet)."""
    gather = GATHERERS.get(title) or getattr(type(pane), "explain", None)
    if gather is None:
        return None
    try:
        return gather(pane, controller)
    except (IndexError, ValueError, KeyError):  # a new run is arriving: the next render fixes it
        return None


def install_cards(panes: dict[str, Any], controller: Any) -> dict[str, Card]:
    """A card at the bottom of every pane, refreshed after its renders (a new run's clearing
    render included), on token selection and (Logits, Sampling) when the settings move."""
    cards = {}
    for title, pane in panes.items():
        card = Card(pane)
        pane.layout().addWidget(card)
        pane.card = card

        def refresh(title: str = title, pane: Any = pane, card: Card = card) -> None:
            card.show_explainer(explainer_of(title, pane, controller))

        pane.after_render.append(refresh)
        if title in TOKEN_CARDS:
            controller.sig_token_selected.connect(lambda _p, r=refresh: r())
        if title in ("Logits", "Sampling"):
            controller.sig_params_changed.connect(lambda _p, r=refresh: r())
        # no clearing on sig_run_started: each pane's own clearing unit refreshes its card (12
        # cards emptied at once re-laid out and repainted the whole window in one 50 ms turn)
        if title == "Logits":  # the softmax written out is in the card's body
            pane.show_logits.toggled.connect(card.toggle.setChecked)
        cards[title] = card
    return cards
