"""The Compare view's columns: one continuation each, its header saying what made it (the
sampler settings, and the What-if changes it ran under), its chips with the first divergence
marked, its numbers and a "show in panes" button."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QPushButton, QWidget

from llm_lens.desktop.state.whatif import mark_text
from llm_lens.desktop.views.sampler_rows import describe_params
from llm_lens.desktop.widgets.token_text import Chip, ChipView, response_chip

ERROR_STYLE = "QLabel { background: #b3261e; color: white; padding: 6px; }"
DIVERGE = QColor("#d93025")
OWN_PREFILL = "own prefill: the change alters how the prompt is read"


def column_header(start: Any, column: int) -> str:
    """What made column ``column`` of a ``CompareStart``: its settings (its seed for K
    samples), then 'clean' or its What-if changes, and whether it read the prompt itself."""
    params = start.params[column]
    header = f"seed {params.seed}" if start.samples else describe_params(params)
    exact = getattr(start, "exact", ())  # a served comparison: what the server returned
    if exact:
        header += " · exact" if exact[column] else f" · approximate (top {start.top_n})"
    changes = start.interventions[column] if start.interventions else ()
    if not changes:
        return f"{header} · clean" if any(start.interventions) else header
    own = bool(start.own_prefill) and start.own_prefill[column]
    shared = OWN_PREFILL if own else "shared prefill"
    return f"{header}\n{mark_text(changes)} ({shared})"


def error_label() -> QLabel:
    """The views' inline message: white on red, selectable, hidden until needed."""
    label: QLabel = QLabel(wordWrap=True, visible=False)
    label.setStyleSheet(ERROR_STYLE)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class CompareChips(ChipView):
    """A column's chips; a red bar stands before the chip of the first divergence."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.diverge = -1

    def set_divergence(self, step: int) -> None:
        self.diverge = step
        self.update()

    def _paint_chip(self, painter: QPainter, i: int, chip: Chip, rect: QRectF) -> None:
        super()._paint_chip(painter, i, chip, rect)
        if i == self.diverge:
            painter.fillRect(QRectF(rect.left() - 3, rect.top() - 1, 3, rect.height() + 2), DIVERGE)


class ColumnWidget(QFrame):
    """One continuation: what made it, its chips, its numbers, and a "show in panes" button.

    Signals:
        sig_step_clicked(int): the step whose chip was clicked.
        sig_show(): "show in panes" was pressed.
    """

    sig_step_clicked = Signal(int)
    sig_show = Signal()

    def __init__(self, header: str, compact: bool = False, parent: QWidget | None = None):
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.header = QLabel(header, wordWrap=not compact)
        self.header.setStyleSheet("QLabel { font-weight: bold; }")
        self.chips = CompareChips()
        self.chips.sig_clicked.connect(self.sig_step_clicked)
        self.stats = QLabel("streaming…", wordWrap=True)
        self.show_button = QPushButton("show in panes", enabled=False)
        self.show_button.setToolTip("Show this run in every pane of the main window")
        self.show_button.clicked.connect(self.sig_show)
        layout = QGridLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        left = Qt.AlignmentFlag.AlignLeft
        if compact:  # one row of K: header, numbers and button on a line, chips below
            layout.addWidget(self.header, 0, 0)
            layout.addWidget(self.stats, 0, 1)
            layout.addWidget(self.show_button, 0, 2)
            layout.addWidget(self.chips, 1, 0, 1, 3)
            layout.setColumnStretch(1, 1)
            return
        for row, widget in enumerate((self.header, self.chips, self.stats)):
            layout.addWidget(widget, row, 0)
        layout.addWidget(self.show_button, 3, 0, left)
        layout.setRowStretch(4, 1)

    def add_steps(self, steps: list[Any]) -> None:
        self.chips.append([response_chip(s) for s in steps])
