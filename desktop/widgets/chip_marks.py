"""Marks drawn over a :class:`~llm_lens.desktop.widgets.token_text.ChipView`'s chips without
touching the chips themselves: a forgotten token (What if?) is dimmed and struck through."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QWidget

from llm_lens.desktop.widgets.token_text import ChipView

DIM = QColor(30, 30, 30, 150)  # over the chip: its fill and text fade
STRIKE = QPen(QColor("#d93025"), 2)


class StruckChips(QWidget):
    """A transparent overlay over ``view`` that dims and strikes through the chips at
    :attr:`positions` (chip indices); clicks pass through to the chips."""

    def __init__(self, view: ChipView) -> None:
        super().__init__(view)
        self.view = view
        self.positions: tuple[int, ...] = ()
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        view.installEventFilter(self)
        self.setGeometry(view.rect())

    def set_positions(self, positions: Iterable[int]) -> None:
        wanted = tuple(positions)
        if wanted != self.positions:
            self.positions = wanted
            self.update()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        if event.type() == QEvent.Type.Resize:
            self.setGeometry(self.view.rect())
        return False

    def paintEvent(self, _event: Any) -> None:  # noqa: N802 (Qt name)
        rects = self.view.rects
        shown = [rects[p] for p in self.positions if 0 <= p < len(rects)]
        if not shown:
            return
        painter = QPainter(self)
        painter.setPen(STRIKE)
        for rect in shown:
            r = QRectF(rect)
            painter.fillRect(r, DIM)
            y = r.center().y()
            painter.drawLine(QPointF(r.left() + 1, y), QPointF(r.right() - 1, y))
        painter.end()
