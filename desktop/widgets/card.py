"""The "how to read this" card under a pane: the headline always shown, the rest folded.

Each pane fills its own card (:meth:`Pane.explainer`); the words come from
:mod:`llm_lens.core.cards`.
"""

from __future__ import annotations

import html

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

BODY_MAX = 96  # pixels: an open card scrolls rather than crowding out its pane
BEFORE_RUN = "After a run: how to read this picture, with the run's own numbers (▸ for more)."
# ^ a card before any run says what it will hold, not a bare ▸


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

    def show_explainer(self, explainer: ex.Explainer | None, before_run: bool = False) -> None:
        """The card for ``explainer``; None empties it, or says what it will hold when
        ``before_run`` (no step to explain yet)."""
        self.explainer = explainer
        if explainer is None:
            self.headline.setText(BEFORE_RUN if before_run else "")
            self.body.setText("Run a prompt (Ctrl+Enter) first." if before_run else "")
            return
        self.headline.setText(explainer.headline)
        parts = [html.escape(explainer.shows)]
        parts += [f"• {html.escape(line)}" for line in explainer.numbers]
        parts += [f"<b>Seen here</b> — {html.escape(line)}" for line in explainer.phenomena]
        if explainer.try_this:
            parts.append(f"<i>Try:</i> {html.escape(explainer.try_this)}")
        self.body.setText("<br>".join(parts))
