"""Tokens pane: the prompt and the response as the model's own token chips, beside cl100k_base.

Each chip is one token id. Whitespace is made visible, special tokens of the chat template are
styled apart, byte pieces of a split UTF-8 character show their bytes, and response chips are
coloured by the probability the raw distribution gave the chosen token. The chips are painted by
one widget (not a widget per chip) so a thousand tokens stay fast, and streamed steps are laid out
incrementally after the last chip.
"""

from __future__ import annotations

import bisect
import html
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
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QScrollArea,
    QSplitter,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core.records import PromptTokens, StepRecord, TokenInfo
from llm_lens.core.tokens import (
    CharGroup,
    TiktokenView,
    bytes_text,
    char_groups,
    cl100k,
    common_prefix,
    regroup_from,
    user_token_range,
)
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.pane import Pane

_WHITESPACE = str.maketrans({" ": "·", "\n": "↵", "\t": "→"})
HPAD, VPAD, GAP = 4.0, 2.0, 3.0
USER_SPECIAL = "#c2185b"  # outline of a special token the user's own text produced
CHUNK = 1024  # chips a view lays out in one scheduler turn (about 10 ms)


def visible(text: str) -> str:
    """Token text with whitespace made visible (space ·, newline ↵, tab →); ∅ when empty."""
    return text.translate(_WHITESPACE) if text else "∅"


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
    """Red (improbable) through amber to green (certain): light fills that take black text."""
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
        for part in event.region():  # an old selection's row and a new one's: not all between
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


def special_mode_text(prompt: PromptTokens) -> str:
    """Which rule read the special-token text in the prompt (shown in chat and raw mode)."""
    if not prompt.parse_special:
        return "special-token text you typed is read as plain text"
    n = prompt.user_special_count
    return (
        f"special tokens parsed from your text: {n}" if n else "special tokens in your text: parsed"
    )


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


def legend_html() -> str:
    """Swatches of the probability colours, and how special tokens look."""
    cells = "".join(
        f"<span style='background:{prob_colour(p).name()};color:black'>&nbsp;{p:g}&nbsp;</span>"
        for p in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    return (
        f"response colour = probability of the chosen token: {cells} · <i>special</i> dashed"
        f" · <span style='color:{USER_SPECIAL}'><i>special from your text</i></span> dash-dot"
    )


CL100K_CAPTION = (
    "your text and the response in OpenAI's cl100k_base (the chat template's own tokens are "
    "this model's markup: cl100k_base would spell them as plain text, so they are not compared)"
)


class TokensPane(Pane):
    """The prompt and response as token chips (click a response chip to select its step)."""

    title = "Tokens"

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.model_view = ChipView()
        self.cl100k_view = ChipView()
        self.counts = QLabel(wordWrap=True)  # long counts wrap instead of widening the window
        self.show_ids = QCheckBox("show ids")
        self.show_ids.toggled.connect(self._on_show_ids)
        self.model_view.sig_clicked.connect(self._on_chip_clicked)
        self.model_view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.model_view.customContextMenuRequested.connect(self._on_context_menu)
        self._prompt: PromptTokens | None = None
        self._n_steps = 0
        self._placed = 0  # prompt chips laid out so far
        self._cl100k: TiktokenView | None = None
        self._cl100k_text = ""  # the text it tokenized
        self._split = 0  # byte length of the rendered prompt inside the cl100k text
        self._user_tokens: tuple[PromptTokens | None, int] = (None, 0)  # the user's own tokens
        self._due = False  # chips changed since the cl100k_base view and the groups were made
        self._build_layout()

    def _build_layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(self.counts, 1)
        top.addWidget(self.show_ids)
        splitter = QSplitter(Qt.Orientation.Vertical)
        for caption, view in (
            (QLabel("model tokens (prompt, then response)"), self.model_view),
            (QLabel(CL100K_CAPTION), self.cl100k_view),
        ):
            caption.setWordWrap(True)  # a long caption wraps instead of widening the window
            box = QWidget()
            col = QVBoxLayout(box)
            col.setContentsMargins(0, 0, 0, 0)
            col.addWidget(caption)
            scroll = QScrollArea()
            scroll.setWidgetResizable(True)
            scroll.setWidget(view)
            col.addWidget(scroll, 1)
            splitter.addWidget(box)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        self.model_scroll = splitter.widget(0).findChild(QScrollArea)
        legend = QLabel(legend_html())
        legend.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(splitter, 1)
        layout.addWidget(legend)

    # ----------------------------------------------------------------- rendering
    def render(self, step: StepRecord | None) -> None:
        """Chips of the prompt, then of the response, and the cl100k_base view, each laid out
        :data:`CHUNK` chips a scheduler turn: a full context's 16,000 chips in one go held the
        GUI thread for 0.2 s. A turn that laid out more than a quarter chunk of prompt chips
        leaves the response and the cl100k_base view to the next (a full context's last prompt
        chunk and first cl100k_base view in one turn took 40 ms)."""
        ctl = self.controller
        prompt, steps = ctl.prompt, ctl.steps
        if prompt is None:
            return
        if prompt is not self._prompt or len(steps) < self._n_steps:
            keep = min(self._kept_chips(prompt), self._placed)
            self.model_view.replace_tail(keep, [])
            self._prompt, self._n_steps, self._placed, self._due = prompt, 0, keep, True
        if self._placed < len(prompt):
            before = self._placed
            self._place_prompt(prompt)
            self._due = True
            if self._placed < len(prompt) or self._placed - before > CHUNK // 4:
                self.schedule()  # the rest in the next turns; the response chips wait
                return
        if len(steps) > self._n_steps:
            self.model_view.append([response_chip(s) for s in steps[self._n_steps :]])
            self._n_steps, self._due = len(steps), True
        if self._due or self.laying_out:
            self._due = False
            self._update_cl100k()
            pieces = [t.raw for t in prompt.tokens] + [s.token.raw for s in steps[: self._n_steps]]
            self.model_view.set_groups(pieces)
            if self.laying_out:
                self.schedule()
        self._show_selection(ctl.selected)

    @property
    def laying_out(self) -> bool:
        """True while chips of the shown tokens are still to be laid out (a turn at a time)."""
        view = self._cl100k
        behind = view is not None and len(self.cl100k_view.chips) < view.count
        placing = self._placed < len(self._prompt or ()) or behind or self._due
        return self._prompt is not None and placing

    def _place_prompt(self, prompt: PromptTokens) -> None:
        """Lay out the next :data:`CHUNK` prompt chips (the last one ends the prompt's line)."""
        stop = min(len(prompt), self._placed + CHUNK)
        chips = [
            token_chip(t, f"prompt token {i}", chat=prompt.chat)
            for i, t in enumerate(prompt.tokens[self._placed : stop], self._placed)
        ]
        if chips and stop == len(prompt):
            chips[-1].line_break = True  # the response starts on its own line
        self.model_view.append(chips)
        self._placed = stop

    def _kept_chips(self, prompt: PromptTokens) -> int:
        """How many chips of the prompt shown now stay as they are for ``prompt``: its common
        prefix with the shown one (all of it when a run repeats the prompt), short of either
        prompt's last chip when their lengths differ (the last chip ends the prompt's line)."""
        old = self._prompt
        if old is None or old.chat != prompt.chat:
            return 0
        pairs = enumerate(zip(old.tokens, prompt.tokens, strict=False))
        same = next((i for i, (a, b) in pairs if a != b), min(len(old), len(prompt)))
        if same == len(old) == len(prompt):
            return same
        return min(same, len(old) - 1, len(prompt) - 1)

    def _on_run_started(self, _prompt: object) -> None:
        """A new run keeps the chips its prompt shares with the last one (rebuilt in
        :meth:`render`): a thousand-token prompt run again costs no chip at all."""
        self.schedule()

    def _show_selection(self, selected: int) -> None:
        n = len(self._prompt or ())
        if selected < 0 or selected >= self._n_steps:
            self.model_view.set_selection(-1, -1)
            return
        chosen = n + selected
        self.model_view.set_selection(chosen, n - 1 if selected == 0 else chosen - 1)
        rect = self.model_view.rects[chosen]
        self.model_scroll.ensureVisible(int(rect.center().x()), int(rect.center().y()), 10, 30)

    def _update_cl100k(self) -> None:
        """Re-tokenize the user's text + response in cl100k_base; update the counts."""
        prompt = self._prompt
        if prompt is None:
            return
        user = prompt.text if prompt.chat else prompt.rendered
        steps = self.controller.steps[: self._n_steps]
        response = b"".join(s.token.raw for s in steps if not s.token.special)
        # a split character at the end is not text yet: cl100k_base reads whole characters
        text = user + response.decode("utf-8", errors="ignore")
        old = self._cl100k
        new = old if old is not None and text == self._cl100k_text else cl100k(text, old)
        # streamed text only changes the tail: keep the chips of the common prefix
        same = common_prefix(old.ids if old else (), new.ids)
        same = min(same, len(self.cl100k_view.chips))  # (those laid out so far)
        self._cl100k, self._cl100k_text, self._split = new, text, len(user.encode("utf-8"))
        self.cl100k_view.replace_tail(same, cl100k_chips(new, same, same + CHUNK))
        self.cl100k_view.set_groups(list(new.pieces))
        if self._user_tokens[0] is not prompt:
            users = sum(not prompt.tokens[i].special for i in user_token_range(prompt))
            self._user_tokens = (prompt, users)
        self.counts.setText(self.counts_text(self._user_tokens[1], steps))

    def counts_text(self, user_tokens: int, steps: list[StepRecord]) -> str:
        """Like for like: the user's text + response in both tokenizers; the template apart."""
        prompt, view = self._prompt, self._cl100k
        if prompt is None or view is None:
            return ""
        name = getattr(self.controller.info, "name", "model")
        ours = user_tokens + sum(not s.token.special for s in steps)
        text = f"your text + response: {name} {ours} tokens · cl100k_base {view.count} tokens"
        if prompt.chat:
            text += f" · chat template: {len(prompt) - user_tokens} tokens ({name} only)"
        return f"{text} · {special_mode_text(prompt)}"

    def clear(self) -> None:
        self._prompt, self._n_steps, self._placed, self._cl100k = None, 0, 0, None
        self.model_view.set_chips([])
        self.cl100k_view.set_chips([])
        self.model_view.set_selection(-1, -1)
        self.counts.setText("")

    def _on_show_ids(self, show: bool) -> None:
        self.model_view.set_show_ids(show)
        self.cl100k_view.set_show_ids(show)

    def _on_chip_clicked(self, index: int) -> None:
        """Response chip i was chosen at step i; the last prompt chip selects the prefill."""
        n = len(self._prompt or ())
        if index >= n - 1:
            self.controller.request_select(max(0, index - n))

    def chip_step(self, chip: int) -> int:
        """The step that chose the token of chip ``chip``, or -1 for a prompt chip."""
        n = len(self._prompt or ())
        return chip - n if n <= chip < n + self._n_steps else -1

    def _on_context_menu(self, pos: Any) -> None:
        """Right-click on a response chip: "Why this token?" opens its explanation."""
        step = self.chip_step(self.model_view.chip_at(QPointF(pos)))
        if step < 0:
            return
        menu = QMenu(self)
        why = menu.addAction(f"Why this token? (step {step})")
        why.triggered.connect(lambda: self.controller.request_explain(step))
        menu.exec(self.model_view.mapToGlobal(pos))

    # ----------------------------------------------------------------- export
    def csv_table(self) -> tuple[list[str], list[list[Any]]]:
        header = ["source", "part", "index", "id", "text", "bytes", "special", "prob"]
        rows: list[list[Any]] = []
        if self._prompt is None:
            return header, rows
        for i, t in enumerate(self._prompt.tokens):
            rows.append(["model", "prompt", i, t.id, t.text, t.raw.hex(" "), t.special, ""])
        for s in self.controller.steps[: self._n_steps]:
            t = s.token
            rows.append(
                ["model", "response", s.index, t.id, t.text, t.raw.hex(" "), t.special, s.prob]
            )
        offset = 0
        view = self._cl100k
        for i, (tid, raw) in enumerate(zip(view.ids, view.pieces, strict=True) if view else ()):
            part = "prompt" if offset < self._split else "response"
            text = bytes_text(raw)
            rows.append(["cl100k", part, i, tid, text, raw.hex(" "), False, ""])
            offset += len(raw)
        return header, rows
