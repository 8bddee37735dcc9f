"""The centre of the window: prompt, run controls, streamed response and the step scrubber."""

from __future__ import annotations

import os
from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSlider,
    QSpinBox,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core.cards import p3
from llm_lens.core.records import generated_text
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.common import FlowLayout, LineText, group


class PromptPanel(QWidget):
    """Prompt editing and the run/step controls. Writes back only through the controller."""

    def __init__(
        self, controller: Controller, examples: list[dict[str, Any]], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self.examples = examples
        self._shown = ""  # what the response box reads
        self._build()
        self._wire()
        self._pick_example(0)
        self._on_busy(False)

    def _build(self) -> None:
        self.examples_box = QComboBox()
        self.examples_box.addItems([e["title"] for e in self.examples])
        self.chat_box = QCheckBox("Chat template", checked=True)
        self.chat_box.setToolTip("Off: raw mode, the model reads exactly the text you typed")
        self.special_box = QCheckBox("Parse special tokens in my text", checked=False)
        self.special_box.setToolTip(
            "Off (safe default, chat and raw mode): '<|im_start|>' typed in the prompt is read as "
            "ordinary text, so it cannot forge a turn. On: it becomes the control token itself."
        )
        self.max_tokens = QSpinBox(
            minimum=1, maximum=4096, value=48, prefix="max ", suffix=" tokens"
        )
        self.run_button = QPushButton("Run  (Ctrl+Enter)")
        self.stop_button = QPushButton("Stop  (Esc)")
        self.continue_button = QPushButton("Continue")
        self.continue_button.setToolTip(
            "Let the shown run go on for max tokens more with its own sampler settings "
            "(Ctrl+Shift+Enter); a run opened from a session needs its model loaded"
        )
        self.examples_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.examples_box.setMinimumContentsLength(16)
        top = FlowLayout()  # wraps onto a second line in a narrow window
        top.addWidget(group(QLabel("Example:"), self.examples_box))
        top.addWidget(group(self.chat_box, self.special_box, self.max_tokens))
        top.addWidget(group(self.run_button, self.continue_button, self.stop_button))
        self.editor = QPlainTextEdit()
        self.editor.setPlaceholderText("Type a prompt, then press Ctrl+Enter")
        self.error = QLabel(wordWrap=True, visible=False)
        self.error.setStyleSheet("QLabel { background: #b3261e; color: white; padding: 6px; }")
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.response = QTextBrowser()
        self.response.setPlaceholderText("The response streams here, token by token.")
        # prompt beside response, both short: the panes below get the window's height
        self.texts = QSplitter(Qt.Orientation.Horizontal)
        self.texts.addWidget(self.editor)
        self.texts.addWidget(self.response)
        self.texts.setChildrenCollapsible(False)
        for widget in (self.editor, self.response):
            widget.setMinimumSize(120, 48)
        self.response.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.response.customContextMenuRequested.connect(self._on_response_menu)
        self.slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=0)
        self.slider.setToolTip("Step scrubber: the prefill (0) or any generated token")
        self.step_label = LineText("no run yet", min_chars=12)
        scrub = QHBoxLayout()
        scrub.addWidget(QLabel("Step:"))
        scrub.addWidget(self.slider, 3)
        scrub.addWidget(self.step_label, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.addLayout(top)
        layout.addWidget(self.texts, 1)
        layout.addWidget(self.error)
        layout.addLayout(scrub)

    def _wire(self) -> None:
        c = self.controller
        self.examples_box.currentIndexChanged.connect(self._pick_example)
        self.run_button.clicked.connect(self.run)
        self.stop_button.clicked.connect(c.request_stop)
        self.continue_button.clicked.connect(self.continue_run)
        c.compare.sig_error.connect(self._on_compare_error)
        c.sig_session_changed.connect(self._on_session)
        c.sig_run_finished.connect(lambda _s: self._on_busy(c.busy))
        c.sig_run_finished.connect(lambda _s: self._show_step())
        self.slider.valueChanged.connect(c.request_select)
        c.sig_busy_changed.connect(self._on_busy)
        c.sig_run_started.connect(self._on_run_started)
        c.sig_steps_changed.connect(self._on_steps)
        c.sig_selection_changed.connect(self._on_selection)
        c.sig_model_loaded.connect(lambda _i: self._on_busy(False))
        c.sig_model_loaded.connect(lambda _i: self.forget_run())

    def _pick_example(self, index: int) -> None:
        if 0 <= index < len(self.examples):
            example = self.examples[index]
            self.editor.setPlainText(example["text"])
            self.chat_box.setChecked(bool(example.get("chat", True)))

    def run(self) -> None:
        self.error.setVisible(False)
        self.controller.request_run(
            self.editor.toPlainText(),
            self.chat_box.isChecked(),
            self.controller.params,
            self.max_tokens.value(),
            parse_special=self.special_box.isChecked(),
        )

    def continue_run(self) -> None:
        self.error.setVisible(False)
        self.controller.compare.request_continue(self.max_tokens.value())

    def _on_compare_error(self, view: str, message: str) -> None:
        if view == "continue":
            self.show_error(message)

    def _on_session(self) -> None:
        """Put a reopened run's prompt back in the editor, so Run and Compare read it again."""
        c = self.controller
        if c.recorded is not None and c.prompt is not None:
            self.editor.setPlainText(c.prompt.text)
            self.chat_box.setChecked(c.prompt.chat)
            self.special_box.setChecked(c.prompt.parse_special)
        self._on_busy(c.busy)

    def show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(True)

    def step_by(self, delta: int) -> None:
        self.controller.request_select(self.controller.selected + delta)

    def step_to(self, index: int) -> None:
        self.controller.request_select(index if index >= 0 else len(self.controller.steps) - 1)

    def _on_busy(self, busy: bool) -> None:
        loaded = self.controller.info is not None
        self.run_button.setEnabled(loaded)
        self.stop_button.setEnabled(busy)
        c = self.controller
        self.continue_button.setEnabled(
            not busy and c.model_info is not None and bool(c.steps) and c.summary is not None
        )

    def forget_run(self) -> None:
        """Another model is shown: no response, step or error of the old one stays (a run of
        the new model, or a reopened one, is announced after this and fills them again)."""
        self.response.clear()
        self._shown = ""
        with QSignalBlocker(self.slider):
            self.slider.setRange(0, 0)
        self.step_label.setText("no run yet")
        self.error.setVisible(False)

    def _on_run_started(self, _prompt: Any) -> None:
        self.response.clear()
        self._shown = ""
        with QSignalBlocker(self.slider):
            self.slider.setRange(0, 0)
        self.step_label.setText("prefill…")

    def _on_steps(self) -> None:
        steps = self.controller.steps
        self._show_response(self._response_text(steps))
        with QSignalBlocker(self.slider):
            self.slider.setRange(0, max(0, len(steps) - 1))
        self._show_step()  # "31 / 34" would go stale while the run grows past 34

    def _show_response(self, text: str) -> None:
        """Make the box read ``text`` by rewriting only what differs from what it reads now (a
        streamed token adds to the end; a split character's bytes become the character). The
        reader's selection and scroll stay; a box scrolled to its end follows the new text.
        Setting the whole text on every token scrolled the box to its top and dropped the
        selection, and laid the whole text out again."""
        shown = self._shown
        if text == shown:
            return
        bar = self.response.verticalScrollBar()
        following = bar.value() >= bar.maximum()
        # a streamed token adds to the end: say so at C speed (commonprefix walks in Python)
        same = len(shown) if text.startswith(shown) else len(os.path.commonprefix([shown, text]))
        cursor = QTextCursor(self.response.document())
        cursor.setPosition(_utf16_len(text[:same]))
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(text[same:])
        self._shown = text
        if following:
            bar.setValue(bar.maximum())

    def _response_text(self, steps: list[Any]) -> str:
        """The run's text as the box holds it: a character split over tokens shows as its bytes,
        never "\ufffd"; a carriage return is a line break, as a Qt document makes it (so each
        character is one position of the box, and a token's text adds to the end)."""
        return generated_text([s.token for s in steps]).replace("\r\n", "\n").replace("\r", "\n")

    def response_step(self, char: int) -> int:
        """The step after which character ``char`` of the response text stood as it is now (for a
        character split over tokens, the step of its last byte), or -1."""
        steps = [s for s in self.controller.steps if not s.token.special]
        final = self._response_text(steps)
        for k, step in enumerate(steps):
            shown = self._response_text(steps[: k + 1])  # the box after step k
            if len(os.path.commonprefix([shown, final])) > char:
                return int(step.index)
        return -1

    def _on_response_menu(self, pos: Any) -> None:
        """The text menu, plus "Why this token?" for the token under the pointer."""
        menu = self.response.createStandardContextMenu(pos)
        at = self.response.cursorForPosition(pos).position()  # in UTF-16 units: 🍕 is two
        step = self.response_step(_char_index(self._shown, at))
        if step >= 0:
            menu.addSeparator()
            why = menu.addAction(f"Why this token? (step {step})")
            why.triggered.connect(lambda: self.controller.request_explain(step))
        menu.exec(self.response.viewport().mapToGlobal(pos))

    def _on_selection(self, index: int) -> None:
        with QSignalBlocker(self.slider):
            self.slider.setValue(index)
        self._show_step()

    def _show_step(self) -> None:
        """The selected step over the steps there are now."""
        c = self.controller
        steps, index = c.steps, c.selected
        if not steps or not 0 <= index < len(steps):
            return
        step = steps[index]
        kind = "prefill" if index == 0 else "decode"
        self.step_label.setText(
            f"{index} / {len(steps) - 1} · {kind} · chose {step.token.text!r} (p={p3(step.prob)})"
        )


def _utf16_len(text: str) -> int:
    """``text``'s length in a Qt text document's positions (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def _char_index(text: str, position: int) -> int:
    """The index in ``text`` of the character at Qt document position ``position``."""
    units = 0
    for i, char in enumerate(text):
        if units >= position:
            return i
        units += 2 if ord(char) > 0xFFFF else 1
    return len(text)
