"""Help → Tour: the article's steps walked on the current run, one pane at a time.

Each stop raises and focuses a pane, moves the selection (a token of the user's own prompt for
tokenization, the prompt's last token whose query chose the first response token at the
prefill, the last step for the cache) and says one sentence made of that pane's card headline,
so the numbers are the run's own. The guide stands beside the pane's dock, not on the figure
it explains, and Esc closes it wherever the focus is (unless a run is streaming: Esc stops it).
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QEvent, QObject, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from llm_lens.desktop.teaching.cards import explainer_of

# (pane title, what this step of the article does); numbered 1..n as the window shows them
STOPS = (
    ("Tokens", "Text becomes tokens: the model reads ids, not letters."),
    ("Embeddings", "Each token id picks a row of the embedding matrix: a vector."),
    ("Positions", "RoPE turns queries and keys by their position."),
    ("Attention", "Attention: each token reads the earlier ones, weighted by softmax."),
    ("Attention lines", "The same head as lines from each token to what it reads."),
    ("Layer stack", "The layers' blocks of attention + MLP add to the residual stream."),
    ("Experts", "In a mixture-of-experts model each MLP is a few of many experts."),
    ("What if?", "Change one part of the model (right-click it) and run again."),
    ("Logits", "The last residual becomes one score per vocabulary entry."),
    ("Sampling", "The scores become probabilities and one token is drawn."),
    ("KV cache", "Every read token's keys and values stay in the cache."),
    ("Timing", "The prefill reads the prompt at once; each later step one token."),
    ("Why this token?", "Why this token: its logit split over the layers and heads."),
)
GAP = 8  # pixels between the guide and the dock it stands beside


def place_beside(size: QSize, target: QRect, screen: QRect) -> QPoint:
    """Where a box of ``size`` stands beside ``target`` (global rects) inside ``screen``: to
    the right or left of it where it fits, else above or below, else the side with the most
    room; always moved inside the screen."""
    w, h = size.width(), size.height()
    top = min(max(target.top(), screen.top()), screen.bottom() - h + 1)
    left_x = min(max(target.left(), screen.left()), screen.right() - w + 1)
    sides = (
        (screen.right() - target.right() - GAP, w, QPoint(target.right() + GAP, top)),
        (target.left() - screen.left() - GAP, w, QPoint(target.left() - GAP - w, top)),
        (screen.bottom() - target.bottom() - GAP, h, QPoint(left_x, target.bottom() + GAP)),
        (target.top() - screen.top() - GAP, h, QPoint(left_x, target.top() - GAP - h)),
    )
    fitting = [point for room, need, point in sides if room >= need]
    point = fitting[0] if fitting else max(sides, key=lambda s: s[0] - s[1])[2]
    x = min(max(point.x(), screen.left()), screen.right() - w + 1)
    y = min(max(point.y(), screen.top()), screen.bottom() - h + 1)
    return QPoint(x, y)


def user_token(prompt: Any) -> int:
    """The first token of the user's own text in ``prompt`` (a PromptTokens): tokenization is
    explained on what they typed, not on the chat template or a response token."""
    start = prompt.rendered.rfind(prompt.text) if prompt.text else -1
    for position, token in enumerate(prompt.tokens):
        if not token.special and token.start >= max(start, 0) and token.text.strip():
            return position
    return len(prompt.tokens) - 1


class TourDialog(QDialog):
    """A small non-modal guide with Back / Next; ``visited`` lists the panes shown."""

    def __init__(self, window: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent or window)
        self.window_ = window
        self.stops = [s for s in STOPS if s[0] in window.panes]
        self.setWindowTitle(f"Tour: one prompt, {len(self.stops)} steps")
        self.index = -1
        self.visited: list[str] = []
        self.text = QLabel(wordWrap=True)
        self.text.setMinimumWidth(420)
        self.back, self.next = QPushButton("Back"), QPushButton("Next")
        self.back.clicked.connect(lambda: self.go(self.index - 1))
        self.next.clicked.connect(lambda: self.go(self.index + 1))
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.back)
        row.addWidget(self.next)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text)
        layout.addLayout(row)
        QApplication.instance().installEventFilter(self)  # type: ignore[union-attr]
        self.finished.connect(self._stop_listening)

    def _stop_listening(self) -> None:
        app = QApplication.instance()
        if app is not None:
            app.removeEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        """Esc closes the guide wherever the focus is: the pane it raised has it, and the main
        window's Esc (Stop) would otherwise take the key. While a run streams, Esc stops it."""
        kinds = (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress)
        if (
            event.type() in kinds
            and isinstance(event, QKeyEvent)
            and event.key() == Qt.Key.Key_Escape
            and self.isVisible()
            and not self.window_.controller.busy
        ):
            event.accept()
            self.reject()
            return True
        return False

    def place(self, dock: QWidget | None) -> None:
        """Fit the text, then stand beside ``dock`` (the pane's dock), inside its screen."""
        self.adjustSize()
        if dock is None or not dock.isVisible():
            return
        screen = (dock.screen() or self.window_.screen()).availableGeometry()
        target = QRect(dock.mapToGlobal(QPoint(0, 0)), dock.size())
        self.move(place_beside(self.size(), target, screen))

    def start(self) -> None:
        ctl = self.window_.controller
        if ctl.prompt is None or not ctl.steps:
            self.text.setText("Run a prompt first (Ctrl+Enter): the tour explains its numbers.")
            self.back.setEnabled(False)
            self.next.setEnabled(False)
            return
        self.go(0)

    def _move_selection(self, title: str) -> None:
        """A token of the user's text for tokenization, the first response token for its
        embedding, the prompt's last token
        (whose query chose it) where it is about reading, the last step for the cache."""
        ctl = self.window_.controller
        n = len(ctl.prompt)
        if title == "Tokens":
            ctl.request_select(0)
            ctl.request_select_token(user_token(ctl.prompt))
        elif title == "Embeddings":
            ctl.request_select_token(n, with_step=True)
        elif title in ("KV cache", "Timing", "Why this token?"):
            ctl.request_select(len(ctl.steps) - 1)
        else:
            ctl.request_select(0)
            ctl.request_select_token(n - 1)

    def go(self, index: int) -> None:
        if not 0 <= index < len(self.stops):
            if index >= len(self.stops):
                self.accept()
            return
        self.index = index
        title, what = self.stops[index]
        window = self.window_
        dock, pane = window.docks.get(title), window.panes[title]
        if dock is not None:
            dock.show()
            dock.raise_()
        self._move_selection(title)
        pane.setFocus()
        pane.render_and_paint()  # the card reads what this pane shows now
        explainer = explainer_of(pane)
        said = explainer.headline if explainer is not None else "(nothing to show yet)"
        said = html.escape(said)  # token texts such as <|im_start|> are not markup
        self.visited.append(title)
        self.text.setText(
            f"<b>{index + 1} · {what}</b><br>{said}<br>"
            f"<small>{index + 1} of {len(self.stops)} · Esc closes the tour</small>"
        )
        self.back.setEnabled(index > 0)
        self.next.setText("Finish" if index == len(self.stops) - 1 else "Next")
        self.place(dock)
