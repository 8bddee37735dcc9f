"""Attention as lines (after BertViz): the tokens twice, queries left and keys right, joined by
lines as strong as the weight one head (or the mean of a layer's heads) gives them.

Only the strongest lines are drawn, so a 400-token prompt stays readable; the pane says how many
it left out. Hovering a token selects it everywhere, and the lines narrow to what it reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import QPointF, QRectF, QSignalBlocker, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core import cards as ex
from llm_lens.core.arithmetic import top_links
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.selection import context_tokens
from llm_lens.desktop.widgets.common import ATTENTION_MAP_SIZE as MAP_SIZE
from llm_lens.desktop.widgets.pane import Pane
from llm_lens.desktop.widgets.token_text import visible_text

LIMIT = 300  # lines drawn at most
ROW = 16  # pixels per token row
COLUMN = 120  # pixels for each column of token texts
MAP_LIMIT = 1024  # prompt maps longer than this come back pooled: no per-token lines


class LinesView(QWidget):
    """Two columns of token texts and the weighted lines between them, painted directly.

    Signals:
        sig_hovered(int): the token position under the mouse (either column).
    """

    sig_hovered = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.labels: list[str] = []
        self.links: tuple[np.ndarray, np.ndarray, np.ndarray] = (
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            np.zeros(0),
        )
        self.selected = -1
        self.setMouseTracking(True)

    def set_data(self, labels: list[str], links: Any, selected: int) -> None:
        self.labels, self.links, self.selected = labels, links, selected
        self.setMinimumHeight(ROW * len(labels) + 8)
        self.update()

    def position_at(self, y: float) -> int:
        pos = int((y - 4) // ROW)
        return pos if 0 <= pos < len(self.labels) else -1

    def mouseMoveEvent(self, event: Any) -> None:  # noqa: N802 (Qt name)
        pos = self.position_at(event.position().y())
        x = event.position().x()
        if pos >= 0 and (x < COLUMN or x > self.width() - COLUMN) and pos != self.selected:
            self.sig_hovered.emit(pos)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt name)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        exposed = QRectF(event.rect())
        left, right = float(COLUMN), float(self.width() - COLUMN)
        ink = self.palette().text().color()
        for i, label in enumerate(self.labels):
            y = 4 + i * ROW
            if y + ROW < exposed.top() or y > exposed.bottom():
                continue
            painter.setPen(QColor("#ff4081") if i == self.selected else ink)
            align = Qt.AlignmentFlag.AlignVCenter
            painter.drawText(
                QRectF(4, y, COLUMN - 10, ROW), align | Qt.AlignmentFlag.AlignRight, label
            )
            painter.drawText(QRectF(right + 6, y, COLUMN - 10, ROW), align, label)
        qs, ks, ws = self.links
        top = float(ws.max()) if ws.size else 1.0
        for q, k, w in zip(qs, ks, ws, strict=True):
            colour = QColor(255, 64, 129) if q == self.selected else QColor(79, 195, 247)
            colour.setAlphaF(float(min(1.0, 0.15 + 0.85 * w / top)))
            painter.setPen(QPen(colour, 0.5 + 3.0 * w / top))
            y0, y1 = 4 + (q + 0.5) * ROW, 4 + (k + 0.5) * ROW
            painter.drawLine(QPointF(left, y0), QPointF(right, y1))
        painter.end()


class AttentionLinesPane(Pane):
    """One head's (or one layer's mean) attention as lines from queries to keys."""

    title = "Attention lines"
    capability = "attention"  # a served run has none: the note says so (Pane.missing_line)
    empty_text = (
        "One head as lines from each token to the tokens it reads. Run a prompt "
        "(Ctrl+Enter) to see it."
    )
    card_follows_token = True

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.layer_box, self.head_box = QSpinBox(), QSpinBox()
        self.mean_heads = QCheckBox("mean of all heads")
        self.mean_heads.setToolTip("Average the layer's heads instead of showing one")
        self.status = QLabel(wordWrap=True)
        self.view = LinesView()
        self.view.sig_hovered.connect(controller.request_select_token)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.view)
        self.scroll = scroll
        row = QHBoxLayout()
        for text, box in (("Layer", self.layer_box), ("Head", self.head_box)):
            row.addWidget(QLabel(text))
            row.addWidget(box)
            box.valueChanged.connect(self.schedule)
        row.addWidget(self.mean_heads)
        row.addStretch(1)
        self.mean_heads.toggled.connect(self.schedule)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(scroll, 1)
        self.matrix = np.zeros((0, 0), np.float32)
        self.total = 0  # the map's non-zero causal cells: every line there is to draw
        self.shown = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        self.hidden_count = 0
        self._scrolled_to = -1  # a redraw scrolls only when the selected token moved
        controller.sig_token_selected.connect(lambda _p: self._draw())

    def on_result(self, kind: str, key: object, result: object) -> None:
        if kind == "attention_map":
            self.schedule()

    def render(self, step: Any) -> None:
        ctl = self.controller
        if ctl.info is None or ctl.prompt is None or step is None:
            return
        for box, top in (
            (self.layer_box, ctl.info.num_layers),
            (self.head_box, ctl.info.num_heads),
        ):
            if box.maximum() != top - 1:
                with QSignalBlocker(box):
                    box.setRange(0, top - 1)
        layer = self.layer_box.value()
        heads = (
            range(ctl.info.num_heads) if self.mean_heads.isChecked() else [self.head_box.value()]
        )
        size = MAP_SIZE if len(ctl.prompt) <= MAP_SIZE else MAP_LIMIT  # share the heatmap's
        maps = [
            ctl.request_analysis("attention_map", layer=layer, head=h, max_size=size) for h in heads
        ]
        if ctl.info.attention_note:
            self.status.setText(ctl.info.attention_note)
            return
        if any(m is None for m in maps):
            self.status.setText(ctl.waiting_text("prompt map", "computing the prompt map…"))
            return
        if any(m.pooled for m in maps):
            self.status.setText(f"the prompt is longer than {MAP_LIMIT} tokens: no per-token lines")
            return
        self.matrix = self.assemble(maps, step, layer, list(heads))
        self.total = int(np.count_nonzero(np.tril(self.matrix) > 0))
        self._draw()

    def assemble(self, maps: list[Any], step: Any, layer: int, heads: list[int]) -> np.ndarray:
        """(T, T) weights over prompt + response up to ``step`` (mean over ``heads``)."""
        ctl = self.controller
        n = len(ctl.prompt) + step.index
        out = np.zeros((n, n), np.float32)  # the maps' own precision: 4 MB at 1,000 tokens
        prompt = maps[0].weights if len(maps) == 1 else np.mean([m.weights for m in maps], axis=0)
        out[: prompt.shape[0], : prompt.shape[1]] = prompt
        for record in ctl.steps[1 : step.index + 1]:
            row = np.asarray(record.attention[layer], np.float32)[heads].mean(axis=0)
            out[record.position, : row.shape[0]] = row
        return out

    def _draw(self) -> None:
        w = self.matrix
        if w.size == 0:
            return
        pos = self.controller.token
        tokens = context_tokens(self.controller)[: w.shape[0]]
        labels = [visible_text(t.text, 14) for t in tokens]
        total = self.total
        if 0 <= pos < w.shape[0]:
            q, k, v, hidden = top_links(w, LIMIT, query=pos)
            what = f"what {labels[pos]!r} (position {pos}) reads"
        else:
            q, k, v, hidden = top_links(w, LIMIT)
            what = "every token"
        self.shown, self.hidden_count = (q, k, v), hidden
        head = (
            "mean of all heads" if self.mean_heads.isChecked() else f"head {self.head_box.value()}"
        )
        self.status.setText(
            f"layer {self.layer_box.value()}, {head}: {what}; {len(v):,} strongest lines drawn of "
            f"{total:,}"
            + (f" ({total - len(v):,} hidden)" if total > len(v) else "")
            + ". Hover a token to follow it; line width and opacity ∝ weight."
        )
        self.view.set_data(labels, self.shown, pos)
        moved, self._scrolled_to = pos != self._scrolled_to, pos
        if moved and pos >= 0:  # the query's row in view (its lines run up to its keys)
            margin = max(3 * ROW, int(0.45 * self.scroll.viewport().height()))
            self.scroll.ensureVisible(COLUMN, int(4 + (pos + 0.5) * ROW), 10, margin)

    def clear(self) -> None:
        self.matrix, self.total = np.zeros((0, 0), np.float32), 0
        self.shown = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        self.hidden_count, self._scrolled_to = 0, -1
        self.view.set_data([], self.shown, -1)
        self.status.setText("")

    def explainer(self) -> ex.Explainer | None:
        if self.matrix.size == 0:
            return None
        ctl, tokens = self.controller, context_tokens(self.controller)
        pos = ctl.token if 0 <= ctl.token < self.matrix.shape[0] else self.matrix.shape[0] - 1
        head = -1 if self.mean_heads.isChecked() else self.head_box.value()
        return ex.attention_card(
            self.layer_box.value(), head, self.matrix, 1, [t.text for t in tokens], pos
        )
