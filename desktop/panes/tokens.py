"""Tokens pane: the prompt and the response as the model's own token chips, beside cl100k_base.

Each chip is one token id. Whitespace is made visible, special tokens of the chat template are
styled apart, byte pieces of a split UTF-8 character show their bytes, and response chips are
coloured by the probability the raw distribution gave the chosen token. The chips are painted by
one widget (not a widget per chip) so a thousand tokens stay fast, and streamed steps are laid out
incrementally after the last chip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, Qt
from PySide6.QtGui import QPainter, QPen
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core import cards as ex
from llm_lens.core.records import PromptTokens, StepRecord
from llm_lens.core.tokens import (
    TiktokenView,
    bytes_text,
    cl100k,
    common_prefix,
    user_token_range,
)
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.selection import context_tokens
from llm_lens.desktop.state.whatif import forgotten, token_changes
from llm_lens.desktop.widgets.chip_marks import StruckChips
from llm_lens.desktop.widgets.marks import MARK_PEN
from llm_lens.desktop.widgets.pane import ContextTarget, Pane
from llm_lens.desktop.widgets.token_text import (
    USER_SPECIAL,
    Chip,
    ChipView,
    cl100k_chips,
    piece_label,
    prob_colour,
    response_chip,
    token_chip,
    visible,
)

__all__ = ["Chip", "ChipView", "TokensPane", "piece_label", "token_chip", "visible"]

CHUNK = 1024  # chips a view lays out in one scheduler turn (about 10 ms)


def special_mode_text(prompt: PromptTokens) -> str:
    """Which rule read the special-token text in the prompt (shown in chat and raw mode)."""
    if not prompt.parse_special:
        return "special-token text you typed is read as plain text"
    n = prompt.user_special_count
    return (
        f"special tokens parsed from your text: {n}" if n else "special tokens in your text: parsed"
    )


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


class _ChipMark(QWidget):
    """A transparent overlay over a ChipView drawing a ring round the selected token's chip."""

    def __init__(self, view: ChipView) -> None:
        super().__init__(view)
        self.view = view
        self.position = -1
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        view.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        if event.type() == QEvent.Type.Resize:
            self.setGeometry(self.view.rect())
        return False

    def paintEvent(self, _event: Any) -> None:  # noqa: N802 (Qt name)
        if not 0 <= self.position < len(self.view.rects):
            return
        painter = QPainter(self)
        painter.setPen(QPen(MARK_PEN.color(), 2, Qt.PenStyle.SolidLine))
        rect: QRectF = self.view.rects[self.position]
        painter.drawRoundedRect(rect.adjusted(-1.5, -1.5, 1.5, 1.5), 4, 4)
        painter.end()


class _ChipHover(QObject):
    """Hovering or clicking a model token chip selects that token everywhere."""

    def __init__(self, view: ChipView, controller: Controller) -> None:
        super().__init__(view)
        self.view, self.controller = view, controller
        view.setMouseTracking(True)
        view.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        kind = event.type()
        if kind in (QEvent.Type.MouseMove, QEvent.Type.MouseButtonPress):
            index = self.view.chip_at(event.position())  # type: ignore[attr-defined]
            if index >= 0 and index != self.controller.token:
                press = kind == QEvent.Type.MouseButtonPress
                self.controller.request_select_token(index, with_step=press)
        return False


class TokensPane(Pane):
    """The prompt and response as token chips (click a response chip to select its step)."""

    title = "Tokens"
    empty_text = (
        "Your prompt as the model reads it, one chip per token. Press Ctrl+Enter to run "
        "the example prompt."
    )
    card_follows_token = True

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.model_view = ChipView()
        self.forgotten = StruckChips(self.model_view)  # What if? a forgotten token struck through
        self.cl100k_view = ChipView()
        self.counts = QLabel(wordWrap=True)  # long counts wrap instead of widening the window
        self.show_ids = QCheckBox("show ids")
        self.show_ids.toggled.connect(self._on_show_ids)
        self.model_view.sig_clicked.connect(self._on_chip_clicked)
        self.model_view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.model_view.customContextMenuRequested.connect(self._on_context_menu)
        self._prompt: PromptTokens | None = None
        self._n_steps = 0
        self._first_step: StepRecord | None = None  # the response chips' first record
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
        self.forgotten.set_positions(forgotten(ctl.interventions))
        if prompt is None:
            return
        if prompt is not self._prompt or len(steps) < self._n_steps or self._restepped(steps):
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
            self._first_step = steps[0]
        if self._due or self.laying_out:
            self._due = False
            self._update_cl100k()
            pieces = [t.raw for t in prompt.tokens] + [s.token.raw for s in steps[: self._n_steps]]
            self.model_view.set_groups(pieces)
            if self.laying_out:
                self.schedule()
        self._show_selection(ctl.selected)

    def _restepped(self, steps: Sequence[StepRecord]) -> bool:
        """Whether the response chips laid out are of records replaced since (a served run's
        steps with the ids its server named once the stream ended): they are laid out again."""
        return self._n_steps > 0 and steps[0] is not self._first_step

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
        self.forgotten.set_positions(())
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

    # ----------------------------------------------------------------- its story
    def install_marks(self) -> bool:
        """A ring round the selected token's chip; hovering or clicking a chip selects it."""
        self._mark = _ChipMark(self.model_view)
        self._mark.setGeometry(self.model_view.rect())
        self._chip_hover = _ChipHover(self.model_view, self.controller)
        return True

    def mark_token(self, position: int) -> None:
        self._mark.position = position if position < len(self.model_view.chips) else -1
        self._mark.update()
        self.linked = {"chip": self._mark.position}

    def context_targets(self) -> list[ContextTarget]:
        """A model token chip: forget it (hidden from every later query, What if?)."""
        return [ContextTarget(self.model_view, self.token_changes)]

    def token_changes(self, x: float, y: float) -> list[Any]:
        from PySide6.QtCore import QPointF

        index = self.model_view.chip_at(QPointF(x, y))
        return token_changes(index) if index >= 0 else []

    def explainer(self) -> ex.Explainer | None:
        ctl = self.controller
        tokens = context_tokens(ctl)
        if not tokens or ctl.prompt is None:
            return None
        name = getattr(ctl.info, "name", "The model")
        return ex.tokens_card(
            [t.text for t in tokens], [t.id for t in tokens], len(ctl.prompt), ctl.token, name
        )

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
