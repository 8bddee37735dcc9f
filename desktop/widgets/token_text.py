"""Token text as the panes draw it: visible whitespace, piece labels, and token chips.

One whitespace table serves every pane and view (chips, axis labels, lens cells, bar ticks), so a
space, newline, tab or carriage return reads the same everywhere. :class:`ChipView` paints a flow
of token chips in one widget (not a widget per chip) so a thousand tokens stay fast.
"""

from __future__ import annotations

import bisect
import html
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from PySide6.QtCore import QEvent, QPointF, QRect, QRectF, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetricsF,
    QHelpEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
)
from PySide6.QtWidgets import QToolTip, QWidget

from llm_lens.core.records import StepRecord, TokenInfo
from llm_lens.core.tokens import (
    CharGroup,
    TiktokenView,
    bytes_text,
    char_groups,
    common_prefix,
    regroup_from,
)

WHITESPACE = {" ": "·", "\n": "↵", "\t": "→", "\r": "␍"}  # how each whitespace character is shown
_WHITESPACE = str.maketrans(WHITESPACE)
HPAD, VPAD, GAP = 4.0, 2.0, 3.0
LABEL_GAP = 10  # pixels at least between two token labels on an axis
USER_SPECIAL = "#c2185b"  # outline of a special token the user's own text produced


def visible(text: str) -> str:
    """Token text with whitespace made visible (space ·, newline ↵, tab →, return ␍); ∅ when
    empty."""
    return text.translate(_WHITESPACE) if text else "∅"


def visible_text(text: str, limit: int = 10) -> str:
    """Token text with whitespace made visible and long pieces shortened, for axis labels."""
    shown = visible(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def label_step(cells: float, pixels: float, label_px: float) -> int:
    """Show every k-th of ``cells`` labels along ``pixels`` so that each gets ``label_px``."""
    per_cell = max(pixels, 1.0) / max(cells, 1.0)
    return max(1, math.ceil(label_px / per_cell))


def spaced_ticks(
    positions: Sequence[float], widths: Sequence[float], px_per_unit: float, gap: float = LABEL_GAP
) -> list[int]:
    """Which of the (sorted) ``positions`` get a label: a label ``widths[i]`` pixels wide,
    centred on its position, is kept only where it clears the last kept one by ``gap`` pixels,
    so token labels of any width never run together ('fundambuildiblock')
    (:func:`label_step` spaces labels of one height evenly)."""
    kept: list[int] = []
    right = -math.inf  # the kept labels' right edge, in pixels
    for i, position in enumerate(positions):
        centre = position * px_per_unit
        if centre - widths[i] / 2 >= right + gap:
            kept.append(i)
            right = centre + widths[i] / 2
    return kept


def piece_label(text: str, raw: bytes, special: bool = False) -> str:
    """What a chip shows: the visible text, with bytes that form no character as ‹e4 bd›
    (:func:`core.tokens.bytes_text`, the one place token bytes become label text)."""
    if special:
        return visible(text)
    whole = bytes_text(raw)
    if "‹" not in whole:  # the common case: whole characters, no byte runs to keep apart
        return visible(whole)
    parts = re.split(r"(‹[0-9a-f ]+›)", whole)  # bytes keep their plain spaces
    return "".join(p if p.startswith("‹") else visible(p) for p in parts if p) or "∅"


def prob_colour(p: float) -> QColor:
    """Red (improbable) through amber to green (certain): light fills that take black text;
    light grey where the probability is not known (a server that sent no logprobs: NaN)."""
    if p != p:  # NaN
        return QColor.fromHsvF(0.0, 0.0, 0.85)
    return QColor.fromHsvF(max(0.0, min(1.0, p)) / 3.0, 0.5, 0.95)


def tooltip_html(lines: Sequence[str]) -> str:
    """Rich-text tooltip of escaped lines (token texts such as <|im_start|> are not markup)."""
    return "<p style='white-space:pre'>" + "<br>".join(html.escape(s) for s in lines) + "</p>"


@dataclass
class Chip:
    """One painted token: label, id, its tooltip's lines, fill (None: palette), and layout hints.

    The tooltip's rich text is built when it is shown: escaping every line of a thousand chips
    took a third of a long prompt's chip build, on the GUI thread at the start of each run.
    """

    label: str
    token_id: int
    tip: tuple[str, ...]
    fill: QColor | None = None
    special: bool = False
    from_user: bool = False  # a special token parsed out of the user's own text
    line_break: bool = False  # start a new line after this chip
    width: float = 0.0
    group: str = ""  # on the first chip of split-character pieces: the character they form
    joined: bool = False  # continues the previous chip's character group (no gap, one bracket)

    @property
    def tooltip(self) -> str:
        return tooltip_html(self.tip)


class ChipView(QWidget):
    """A flow layout of token chips painted directly, with hover tooltips and clicks.

    A change repaints only the chips it touched: the chips laid out again (and those they
    replace), and the old and new selection. A streamed step appends one chip and moves the
    selection by one; repainting every chip on screen for it took 5-10 ms a view for a
    1,000-token prompt, after the pane's unit, on the GUI thread that the model thread needs.

    Signals:
        sig_clicked(int): index of the chip clicked.
    """

    sig_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.chips: list[Chip] = []
        self.rects: list[QRectF] = []
        self.show_ids = False
        self.selected = -1  # drawn with a thick highlight border
        self.marked = -1  # underlined: the token the selected step read
        self._cursor = QPointF(GAP, GAP)
        self._small = QFont(self.font())
        self._small.setPointSizeF(max(6.0, self.font().pointSizeF() * 0.75))
        self._laid_width = -1
        self._pieces: list[bytes] = []  # what the chips' groups were found in (a prefix stays)
        self._groups: list[CharGroup] = []
        # a taller view (one more row of chips) is painted only where it grew
        self.setAttribute(Qt.WidgetAttribute.WA_StaticContents)

    def set_chips(self, chips: list[Chip]) -> None:
        self.replace_tail(0, chips)

    def replace_tail(self, start: int, chips: list[Chip]) -> None:
        """Keep chips[:start], replace the rest by ``chips`` and lay out only those."""
        self._repaint(self.rects[start:])  # where the replaced chips were
        self.chips, self.rects = self.chips[:start], self.rects[:start]
        del self._pieces[start:]  # the new chips' group marks are their own until set_groups
        self._cursor = QPointF(GAP, GAP)
        if start > 0:
            last = self.rects[-1]
            self._cursor = QPointF(last.right() + GAP, last.top())
            if self.chips[-1].line_break:
                self._cursor = QPointF(GAP, last.bottom() + GAP)
        self.append(chips)

    def append(self, chips: list[Chip]) -> None:
        """Add chips after the last one, laying out only the new ones."""
        fm, small = QFontMetricsF(self.font()), QFontMetricsF(self._small)
        for chip in chips:
            chip.width = fm.horizontalAdvance(chip.label) + 2 * HPAD
            if chip.group:
                chip.width += fm.horizontalAdvance(chip.group) + HPAD
            if self.show_ids:
                chip.width += small.horizontalAdvance(str(chip.token_id)) + HPAD
        start = len(self.chips)
        self.chips.extend(chips)
        self._layout(start)

    def set_show_ids(self, show: bool) -> None:
        self.show_ids = show
        self.set_chips(self.chips)

    def set_selection(self, selected: int, marked: int) -> None:
        if (selected, marked) != (self.selected, self.marked):
            was = (self.selected, self.marked)
            self.selected, self.marked = selected, marked
            for i in {*was, selected, marked} - {-1}:
                self._repaint(self.rects[i : i + 1])  # (none for a chip not laid out yet)

    def _repaint(self, rects: Sequence[QRectF]) -> None:
        """Schedule a paint of the rows from the first of ``rects`` to the last, chips laid out
        one after another (a chip's pen reaches a little outside it). Qt keeps the rows of
        several calls apart in the paint's region."""
        if rects:
            top, bottom = rects[0].top(), rects[-1].bottom()  # rows' bottoms never decrease
            self.update(QRect(0, int(top) - 2, self.width(), int(bottom - top) + 5))

    def _layout(self, start: int) -> None:
        """Place chips[start:] left to right, wrapping at the widget's width."""
        width, h = max(self.width(), 80), QFontMetricsF(self.font()).height() + 2 * VPAD
        self._laid_width = self.width()
        x, y = self._cursor.x(), self._cursor.y()
        for chip in self.chips[start:]:
            if chip.joined and x > GAP:
                x -= GAP - 1  # a character's pieces stay together
            elif x + chip.width > width - GAP and x > GAP:
                x, y = GAP, y + h + GAP
            self.rects.append(QRectF(x, y, chip.width, h))
            x += chip.width + GAP
            if chip.line_break:
                x, y = GAP, y + h + GAP
        self._cursor = QPointF(x, y)
        self.setMinimumHeight(int(y + h + 2 * GAP))
        self._repaint(self.rects[start:])

    def set_groups(self, pieces: list[bytes]) -> None:
        """Mark runs of chips whose bytes form a character together (``pieces``: each chip's
        bytes); lays out again from the first chip whose grouping changed. Only the pieces
        after those of the last call that stayed the same are scanned again (a streamed step
        adds one chip to thousands)."""
        pieces = pieces[: len(self.chips)]
        old = self._pieces
        same = common_prefix(old, pieces)
        resume = regroup_from(self._groups, same)
        found = char_groups(pieces, resume)  # the groups before resume stand
        marks = [("", False)] * (len(self.chips) - resume)
        for g in found:
            marks[g.first - resume] = (g.text, False)
            for k in range(g.first + 1, g.first + g.count):
                marks[k - resume] = ("", True)
        tail = self.chips[resume:]
        changed = [
            i for i, c in enumerate(tail, resume) if (c.group, c.joined) != marks[i - resume]
        ]
        for i in changed:
            self.chips[i].group, self.chips[i].joined = marks[i - resume]
        if changed:
            self.replace_tail(changed[0], self.chips[changed[0] :])
        self._pieces = pieces
        self._groups = [g for g in self._groups if g.first < resume] + found

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        if self.width() != self._laid_width:
            self.rects, self._cursor = [], QPointF(GAP, GAP)
            self._layout(0)
            self.update()  # every chip moved

    def _rows_from(self, top: float, bottom: float) -> Iterator[int]:
        """Indices of the chips on the rows between ``top`` and ``bottom`` (chips are laid out
        in reading order, so their rows' bottoms never decrease: no walk over 8,000 chips on
        every repaint or hover)."""
        start = bisect.bisect_left(self.rects, top, key=QRectF.bottom)
        for i in range(start, min(len(self.rects), len(self.chips))):
            if self.rects[i].top() > bottom:
                return
            yield i

    def chip_at(self, pos: QPointF) -> int:
        return next(
            (i for i in self._rows_from(pos.y(), pos.y()) if self.rects[i].contains(pos)), -1
        )

    def mousePressEvent(self, event: Any) -> None:
        index = self.chip_at(event.position())
        if index >= 0 and event.button() == Qt.MouseButton.LeftButton:
            self.sig_clicked.emit(index)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            help_event = cast(QHelpEvent, event)
            index = self.chip_at(QPointF(help_event.pos()))
            if index >= 0:
                QToolTip.showText(help_event.globalPos(), self.chips[index].tooltip, self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painted: set[int] = set()
        for part in event.region():  # type: ignore[attr-defined]  # rows of the old and new selection
            exposed = QRectF(part)
            for i in self._rows_from(exposed.top(), exposed.bottom()):
                if i not in painted and self.rects[i].intersects(exposed):
                    painted.add(i)
                    self._paint_chip(painter, i, self.chips[i], self.rects[i])
        painter.end()

    def _paint_group(self, painter: QPainter, chip: Chip, rect: QRectF, text: QRectF) -> None:
        """The character a group of byte pieces forms, in bold before the first piece's bytes,
        and a bracket under every piece of the group."""
        colour = self.palette().color(QPalette.ColorRole.Highlight)
        painter.fillRect(QRectF(rect.left(), rect.bottom() - 2, rect.width() + 1, 2), colour)
        if chip.group:
            bold = QFont(self.font())
            bold.setBold(True)
            painter.setFont(bold)
            painter.setPen(colour)
            painter.drawText(text, Qt.AlignmentFlag.AlignVCenter, chip.group)

    def _paint_chip(self, painter: QPainter, i: int, chip: Chip, rect: QRectF) -> None:
        pal = self.palette()
        alternate = QPalette.ColorRole.AlternateBase if i % 2 else QPalette.ColorRole.Button
        fill = chip.fill or pal.color(alternate)
        pen = QPen(pal.color(QPalette.ColorRole.Mid), 1)
        if chip.special:
            pen = QPen(pal.color(QPalette.ColorRole.Highlight), 1.2, Qt.PenStyle.DashLine)
        if chip.from_user:
            pen = QPen(QColor(USER_SPECIAL), 2.0, Qt.PenStyle.DashDotLine)
        if i == self.selected:
            pen = QPen(pal.color(QPalette.ColorRole.Highlight), 3)
        painter.setPen(pen)
        painter.setBrush(fill)
        painter.drawRoundedRect(rect.adjusted(0.5, 0.5, -0.5, -0.5), 3, 3)
        if i == self.marked:
            band = QRectF(rect.left(), rect.bottom() - 3, rect.width(), 3)
            painter.fillRect(band, pal.color(QPalette.ColorRole.Highlight))
        ink = QColor("black") if chip.fill is not None else pal.color(QPalette.ColorRole.Text)
        font = QFont(self.font())
        font.setItalic(chip.special)
        painter.setFont(font)
        painter.setPen(ink)
        text_rect = rect.adjusted(HPAD, 0, -HPAD, 0)
        if chip.group or chip.joined:
            self._paint_group(painter, chip, rect, text_rect)
            painter.setPen(ink)
            painter.setFont(font)
            if chip.group:
                text_rect = text_rect.adjusted(QFontMetricsF(font).horizontalAdvance(chip.group)
                                               + HPAD, 0, 0, 0)  # fmt: skip
        painter.drawText(text_rect, Qt.AlignmentFlag.AlignVCenter, chip.label)
        if self.show_ids:
            painter.setFont(self._small)
            ink.setAlphaF(0.6)
            painter.setPen(ink)
            painter.drawText(
                text_rect,
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight,
                str(chip.token_id),
            )


def special_origin(info: TokenInfo, chat: bool = True) -> str:
    """Who put a special token in the sequence: the user's text, the template or the tokenizer."""
    if info.from_user:
        return "special token from YOUR text (parse special tokens is on)"
    return "special token (chat template)" if chat else "special token (added by the tokenizer)"


def token_chip(
    info: TokenInfo, where: str, more: tuple[str, ...] = (), fill: Any = None, chat: bool = True
) -> Chip:
    """A model token's chip; its tooltip always gives id, repr(text) and the bytes in hex."""
    lines = (where, f"id {info.id}", f"text {info.text!r}", f"bytes {info.raw.hex(' ')}", *more)
    if info.special:
        lines += (special_origin(info, chat),)
    label = piece_label(info.text, info.raw, info.special)
    chip = Chip(label, info.id, lines, fill=fill, special=info.special)
    chip.from_user = info.from_user
    return chip


def response_chip(step: StepRecord) -> Chip:
    stats = f"prob {step.prob:.4f} · logprob {step.logprob:.3f} · rank {step.rank + 1}"
    where = f"response token {step.index} (chosen at step {step.index})"
    return token_chip(step.token, where, (stats,), prob_colour(step.prob))


def cl100k_chips(view: TiktokenView, start: int = 0, stop: int | None = None) -> list[Chip]:
    """Chips of cl100k_base tokens ``start`` up to ``stop`` (a newline ends a line)."""
    chips = []
    pairs = zip(view.ids[start:stop], view.pieces[start:stop], strict=True)
    for i, (tid, raw) in enumerate(pairs, start):
        text = bytes_text(raw)
        lines = (f"cl100k_base token {i}", f"id {tid}", f"text {text!r}", f"bytes {raw.hex(' ')}")
        chips.append(Chip(piece_label(text, raw), tid, lines, line_break=text.endswith("\n")))
    return chips
