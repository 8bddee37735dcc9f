"""Small widgets that let a row shrink with its window: a wrapping layout and an eliding label.

A ``QHBoxLayout`` row is as wide as the sum of its children's minimum widths, and a plain
``QLabel`` as wide as its longest line: either one inside a dock sets the dock's minimum width,
and the docks' minimums add up to the main window's (the window once could not be narrower than
2011 px). :class:`FlowLayout` wraps its items onto more lines instead (Qt's flow-layout example),
and :class:`ElidedLabel` shows "…" with the full text in its tooltip. :class:`LineText` is an
eliding line whose size does not follow its text, for text that changes with every token.
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLayout,
    QLayoutItem,
    QSizePolicy,
    QTabBar,
    QWidget,
)


class FlowLayout(QLayout):
    """Items left to right, wrapping onto a new line when the width runs out."""

    def __init__(self, parent: QWidget | None = None, spacing: int = 6) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._spacing = spacing
        self.setContentsMargins(0, 0, 0, 0)

    def addItem(self, item: QLayoutItem) -> None:  # noqa: N802 (Qt override)
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:  # noqa: N802 (Qt override)
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:  # noqa: N802 (Qt override)
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802 (Qt override)
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:  # noqa: N802 (Qt override)
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt override)
        return self._arrange(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802 (Qt override)
        super().setGeometry(rect)
        self._arrange(rect, move=True)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        """One line of every item."""
        width = sum(i.sizeHint().width() for i in self._items)
        width += self._spacing * max(0, len(self._items) - 1)
        height = max((i.sizeHint().height() for i in self._items), default=0)
        m = self.contentsMargins()
        return QSize(width + m.left() + m.right(), height + m.top() + m.bottom())

    def minimumSize(self) -> QSize:  # noqa: N802 (Qt override)
        """As narrow as the widest single item."""
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        m: QMargins = self.contentsMargins()
        return size + QSize(m.left() + m.right(), m.top() + m.bottom())

    def _arrange(self, rect: QRect, move: bool) -> int:
        """Place (or only measure) the items in ``rect``; returns the height they need."""
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        x, y, line = area.x(), area.y(), 0
        for item in self._items:
            if item.isEmpty():
                continue
            hint = item.sizeHint().boundedTo(QSize(area.width(), 1 << 20))
            if x > area.x() and x + hint.width() > area.right() + 1:
                x, y, line = area.x(), y + line + self._spacing, 0
            if move:
                item.setGeometry(QRect(QPoint(x, y), hint))
            x += hint.width() + self._spacing
            line = max(line, hint.height())
        return y + line - rect.y() + m.bottom()


def keep_tab_names(window: QWidget) -> None:
    """The window's dock tab bars keep each name whole and scroll when they run out of room:
    Qt's own elide them, and ten tabs at 1366 px read "To…", "Atte…" (a window's dock tab bars
    are its direct QTabBar children, made when docks are tabbed)."""
    for bar in window.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly):
        if bar.elideMode() != Qt.TextElideMode.ElideNone:
            bar.setElideMode(Qt.TextElideMode.ElideNone)
            bar.setUsesScrollButtons(True)


def group(*widgets: QWidget, spacing: int = 4) -> QWidget:
    """Widgets that stay together on one line of a :class:`FlowLayout` (a label and its box)."""
    box = QWidget()
    row = QHBoxLayout(box)
    row.setContentsMargins(0, 0, 0, 0)
    row.setSpacing(spacing)
    for widget in widgets:
        row.addWidget(widget)
    return box


class ElidedLabel(QLabel):
    """A one-line label that shortens its text with "…" instead of widening its parent.

    The full text is the tooltip while it is cut. ``text()`` is always the full text.
    """

    def __init__(self, text: str = "", parent: QWidget | None = None, min_chars: int = 8) -> None:
        super().__init__(text, parent)
        self._min_chars = min_chars
        self.setTextFormat(Qt.TextFormat.PlainText)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        hint = super().minimumSizeHint()
        width = self.fontMetrics().averageCharWidth() * self._min_chars
        return QSize(min(hint.width(), width), hint.height())

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt override)
        _paint_elided(self, self.text(), self.alignment())

    def is_elided(self) -> bool:
        metrics = self.fontMetrics()
        return metrics.horizontalAdvance(self.text()) > self.contentsRect().width()


class LineText(QWidget):
    """One line of text, shortened with "…" (the full text in its tooltip), whose size does not
    follow its text: a new text repaints the line and lays out nothing.

    A ``QLabel`` asks its parent's layout to run again on every ``setText``, and each layout
    that runs asks its parent's: a label in the window's centre re-laid out the main window,
    every dock, on each of the 30 updates a second of a streaming run. ``chars`` average
    characters wide by preference, ``min_chars`` at least.
    """

    def __init__(
        self, text: str = "", parent: QWidget | None = None, min_chars: int = 8, chars: int = 40
    ) -> None:
        super().__init__(parent)
        self._text = text
        self._min_chars, self._chars = min_chars, chars
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)

    def text(self) -> str:
        return self._text

    def setText(self, text: str) -> None:  # noqa: N802 (QLabel's name)
        if text != self._text:
            self._text = text
            self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        return QSize(self.fontMetrics().averageCharWidth() * self._chars, self._line_height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        return QSize(self.fontMetrics().averageCharWidth() * self._min_chars, self._line_height())

    def _line_height(self) -> int:
        return self.fontMetrics().height() + 2

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt override)
        _paint_elided(self, self._text, Qt.AlignmentFlag.AlignLeft)


def _paint_elided(widget: QWidget, text: str, alignment: Qt.AlignmentFlag) -> None:
    """Draw ``text`` on one line of ``widget``, cut with "…" where it is too long, and make the
    whole text the widget's tooltip while it is cut."""
    painter = QPainter(widget)
    rect = widget.contentsRect()
    shown = widget.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, rect.width())
    widget.setToolTip("" if shown == text else text)
    painter.drawText(rect, int(alignment | Qt.AlignmentFlag.AlignVCenter), shown)
    painter.end()


ATTENTION_MAP_SIZE = 256  # prompt maps longer than this come back max-pooled from the worker; the
# Attention and Attention lines panes ask for the same size, so one computed map serves both
