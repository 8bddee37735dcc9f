"""The logit lens as a table: one row per layer, the lens' top tokens with their probabilities,
the cells holding the model's final prediction highlighted and the first such layer starred."""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QFont, QPalette
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from llm_lens.desktop.widgets.token_text import visible

LENS_K = 5


def shown(text: str) -> str:
    """A token's text with its whitespace made visible, as every pane shows it
    (:func:`~llm_lens.desktop.widgets.token_text.visible`)."""
    return visible(text)


def lens_cell(text: str, prob: float) -> str:
    """'0.98 ·type': the probability first, so a narrow column cuts the token's tail, never
    the number ('·type …' hid it at 1920×1080)."""
    return f"{prob:.2f} {shown(text)}"


def first_agreement(lens: Any) -> int | None:
    """The first layer whose lens top-1 is the model's final prediction (None if none)."""
    hits = np.flatnonzero(np.asarray(lens.top_ids)[:, 0] == lens.final_id)
    return int(hits[0]) if hits.size else None


def build_lens_table() -> tuple[QTableWidget, QLabel, QWidget]:
    """The table (LENS_K columns, small read-only cells), its status line above it, and the
    box holding both (the "Logit lens (this step)" tab)."""
    table = QTableWidget(0, LENS_K)
    table.setHorizontalHeaderLabels([f"top {i + 1}" for i in range(LENS_K)])
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
    table.verticalHeader().setDefaultSectionSize(18)
    table.setTextElideMode(Qt.TextElideMode.ElideRight)
    small = QFont(table.font())
    small.setPointSizeF(max(6.0, small.pointSizeF() - 1))
    table.setFont(small)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    status = QLabel()
    status.setWordWrap(True)
    box_widget = QWidget()
    box = QVBoxLayout(box_widget)
    box.setContentsMargins(0, 0, 0, 0)
    box.addWidget(status)
    box.addWidget(table)
    return table, status, box_widget


def fill_lens_table(
    table: QTableWidget, status: QLabel, lens: Any, step: Any, pal: QPalette
) -> int | None:
    """Fill the table with ``lens`` of ``step``; cells holding the final prediction are bold on
    the highlight colour. Returns the first layer that agrees (None if none)."""
    rows = lens.top_ids.shape[0]
    table.setRowCount(rows)
    first = first_agreement(lens)
    mark_bg, mark_fg = QBrush(pal.highlight().color()), QBrush(pal.highlightedText().color())
    bold = QFont(table.font())
    bold.setBold(True)
    for r in range(rows):
        label = "emb" if r == 0 else str(r)
        table.setVerticalHeaderItem(r, QTableWidgetItem(label + (" ★" if r == first else "")))
        for c in range(lens.top_ids.shape[1]):
            text = lens_cell(lens.top_texts[r][c], float(lens.top_probs[r, c]))
            item = QTableWidgetItem(text)
            item.setToolTip(f"{text} · id {int(lens.top_ids[r, c])}")
            if int(lens.top_ids[r, c]) == lens.final_id:
                item.setFont(bold)
                item.setBackground(mark_bg)
                item.setForeground(mark_fg)
            table.setItem(r, c, item)
    final_text = f"'{shown(lens.top_texts[-1][0])}'"
    where = f"first at layer {first} (★)" if first is not None else "at no layer"
    status.setText(
        f"step {step.index}: the model's prediction {final_text} is the lens' top-1 {where}; "
        "highlighted cells hold that token."
    )
    if first is not None:
        table.scrollToItem(table.item(first, 0))
    return first
