"""Help → Tour: the article's seven steps walked on the current run, one pane at a time.

Each stop raises and focuses a pane, moves the selection (the first response token, or the
prompt's last token whose query chose it at the prefill) and says one sentence made of that
pane's card headline, so the numbers are the run's own.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from llm_lens.desktop.teaching.cards import explainer_of

# (pane title, what this step of the article does)
STOPS = (
    ("Tokens", "1 · Text becomes tokens: the model reads ids, not letters."),
    ("Embeddings", "2 · Each token id picks a row of the embedding matrix: a vector."),
    ("Positions", "3 · RoPE turns queries and keys by their position."),
    ("Attention", "4 · Attention: each token reads the earlier ones, weighted by softmax."),
    ("Attention lines", "4 · The same head as lines from each token to what it reads."),
    ("Layer stack", "5 · Thirty blocks of attention + MLP add to the residual stream."),
    ("Experts", "5 · In a mixture-of-experts model each MLP is a few of many experts."),
    ("Logits", "6 · The last residual becomes one score per vocabulary entry."),
    ("Sampling", "7 · The scores become probabilities and one token is drawn."),
    ("KV cache", "Then: every read token's keys and values stay in the cache."),
    ("Timing", "Then: the prefill reads the prompt at once; each later step one token."),
    ("Why this token?", "And why this token: its logit split over the layers and heads."),
)


class TourDialog(QDialog):
    """A small non-modal guide with Back / Next; ``visited`` lists the panes shown."""

    def __init__(self, window: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent or window)
        self.setWindowTitle("Tour: one prompt, seven steps")
        self.window_ = window
        self.stops = [s for s in STOPS if s[0] in window.panes]
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

    def start(self) -> None:
        ctl = self.window_.controller
        if ctl.prompt is None or not ctl.steps:
            self.text.setText("Run a prompt first (Ctrl+Enter): the tour explains its numbers.")
            self.back.setEnabled(False)
            self.next.setEnabled(False)
            return
        self.go(0)

    def _move_selection(self, title: str) -> None:
        """The first response token where the story is about a token, the prompt's last token
        (whose query chose it) where it is about reading, the last step for the cache."""
        ctl = self.window_.controller
        n = len(ctl.prompt)
        if title in ("Tokens", "Embeddings"):
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
            f"<b>{what}</b><br>{said}<br><small>{index + 1} of {len(self.stops)}</small>"
        )
        self.back.setEnabled(index > 0)
        self.next.setText("Finish" if index == len(self.stops) - 1 else "Next")
