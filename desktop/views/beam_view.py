"""Beam search, step by step: the live beams with their scores, the candidates each step kept
or pruned (greyed), and the best finished beam. A slider replays the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core.runs.beam import MAX_BEAMS, MIN_BEAMS
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.views.compare_columns import error_label

LIVE_TITLE = "Live beams after this step, best first"
DONE_TITLE = "Search done: the finished beams, best first (the first is the answer)"
LIVE_HEADERS = ["beam", "text so far", "cumulative log-prob", "extends"]
DONE_HEADERS = ["rank", "text", "score (log-prob / length^penalty)", "fate"]
GREY = QColor("#9aa0a6")
FINISHED = QColor("#1e8e3e")


def one_line(text: str) -> str:
    """Text with its line breaks made visible, for a table cell."""
    return text.replace("\n", "↵")


def _table(headers: list[str]) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
    return table


def _fill(table: QTableWidget, rows: list[list[str]], colours: list[QColor | None]) -> None:
    table.setRowCount(len(rows))
    for r, (cells, colour) in enumerate(zip(rows, colours, strict=True)):
        for c, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if colour is not None:
                item.setForeground(QBrush(colour))
            if colour is GREY:
                font = QFont(item.font())
                font.setStrikeOut(True)
                item.setFont(font)
            table.setItem(r, c, item)


class BeamView(QWidget):
    """The beam-search view (a dock). Requests go through ``controller.compare``;
    ``prompt_source()`` gives the editor's (text, chat mode)."""

    title = "Beam search"

    def __init__(
        self,
        controller: Controller,
        prompt_source: Callable[[], tuple[str, bool]],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller, self.compare = controller, controller.compare
        self.prompt_source = prompt_source
        self._build()
        c = self.compare
        c.sig_beam_started.connect(self._on_started)
        c.sig_beam_step.connect(self._on_step)
        c.sig_beam_finished.connect(self._on_finished)
        c.sig_error.connect(lambda view, msg: self.show_error(msg) if view == "beam" else None)
        controller.sig_busy_changed.connect(self.stop_button.setEnabled)
        self.stop_button.setEnabled(False)

    def _build(self) -> None:
        self.beams = QSpinBox(minimum=MIN_BEAMS, maximum=MAX_BEAMS, value=3, prefix="beams ")
        self.max_tokens = QSpinBox(minimum=1, maximum=512, value=16, prefix="max ")
        self.max_tokens.setSuffix(" tokens")
        self.run_button, self.stop_button = QPushButton("Run beam search"), QPushButton("Stop")
        self.run_button.clicked.connect(self.run)
        self.stop_button.clicked.connect(self.compare.request_stop)
        top = QHBoxLayout()
        for w in (self.beams, self.max_tokens):
            top.addWidget(w)
        top.addStretch(1)
        top.addWidget(self.run_button)
        top.addWidget(self.stop_button)
        self.error = error_label()
        self.slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=0)
        self.slider.setToolTip("Replay the search step by step")
        self.slider.valueChanged.connect(self.show_step)
        self.step_label = QLabel("no search yet")
        scrub = QHBoxLayout()
        scrub.addWidget(QLabel("Step:"))
        scrub.addWidget(self.slider, 1)
        scrub.addWidget(self.step_label)
        self.live = _table(LIVE_HEADERS)
        self.candidates = _table(["from", "continuation", "cumulative log-prob", "fate"])
        self.best = QLabel("", wordWrap=True)
        self.best.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.error)
        layout.addLayout(scrub)
        self.live_title = QLabel(LIVE_TITLE)
        layout.addWidget(self.live_title)
        layout.addWidget(self.live, 2)
        layout.addWidget(QLabel("Candidates this step (2·B best continuations; pruned ones grey)"))
        layout.addWidget(self.candidates, 3)
        layout.addWidget(self.best)

    def run(self) -> None:
        self.error.setVisible(False)
        text, chat = self.prompt_source()
        self.compare.request_beam(text, chat, self.beams.value(), self.max_tokens.value())

    def show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(True)

    # ----------------------------------------------------------------- streaming
    def _on_started(self, _prompt: Any) -> None:
        self.best.setText("searching…")
        with QSignalBlocker(self.slider):
            self.slider.setRange(0, 0)
        _fill(self.live, [], [])
        _fill(self.candidates, [], [])

    def _on_step(self, _frame: Any) -> None:
        n = len(self.compare.beam_frames)
        follow = self.slider.value() == self.slider.maximum()
        with QSignalBlocker(self.slider):
            self.slider.setRange(0, n - 1)
            if follow:
                self.slider.setValue(n - 1)
        self.show_step(self.slider.value())

    def _on_finished(self, result: Any) -> None:
        self.show_step(self.slider.value())  # the last step becomes the search's end
        self.best.setText(
            f"best beam ({result.finish_reason}): {result.text!r} · "
            f"score {result.score:.3f} (log-prob / length^{result.length_penalty:g}) · "
            f"{len(result.token_ids)} tokens"
        )

    # ----------------------------------------------------------------- replay
    def show_step(self, index: int) -> None:
        """Show the live beams and the candidates of step ``index``."""
        frames = self.compare.beam_frames
        if not 0 <= index < len(frames):
            return
        frame, before = frames[index], frames[index - 1].texts if index > 0 else ()
        step = frame.step
        self.step_label.setText(f"{index} / {len(frames) - 1}")
        result = self.compare.beam_result
        if index == len(frames) - 1 and result is not None and result.finish_reason == "done":
            self._show_finished(frame)
        else:
            self._show_live(frame)
        rows, colours = [], []
        for c in step.candidates:
            base = before[c.beam] if c.beam < len(before) else ""
            rows.append([f"beam {c.beam}", one_line(base + c.text), f"{c.score:.3f}", c.fate])
            colours.append(GREY if c.fate in ("pruned", "stopped") else
                           FINISHED if c.fate == "finished" else None)  # fmt: skip
        _fill(self.candidates, rows, colours)

    def _show_live(self, frame: Any) -> None:
        """Beams still searching; none once every candidate stopped (transformers marks those
        slots −1e9, and they are not live: the candidates table shows them stopped)."""
        step = frame.step
        self.live_title.setText(LIVE_TITLE)
        self.live.setHorizontalHeaderLabels(LIVE_HEADERS)
        rows = [
            [str(b), one_line(text), score_text(score), f"beam {parent}"]
            for b, (text, score, parent) in enumerate(
                zip(frame.texts, step.scores, step.parents, strict=True)
            )
            if score > DONE_SCORE
        ]
        _fill(self.live, rows, [None] * len(rows))

    def _show_finished(self, frame: Any) -> None:
        """The end of the search: its finished hypotheses, the answer (the best) first."""
        self.live_title.setText(DONE_TITLE)
        self.live.setHorizontalHeaderLabels(DONE_HEADERS)
        rows = [
            ["best" if i == 0 else f"#{i + 1}", one_line(text), f"{h.score:.3f}", "finished"]
            for i, (h, text) in enumerate(zip(frame.step.finished, frame.finished, strict=True))
        ]
        _fill(self.live, rows, [FINISHED] * len(rows))
        if rows:
            for c in range(self.live.columnCount()):
                item = self.live.item(0, c)
                if item is None:
                    continue
                font = QFont(item.font())
                font.setBold(True)
                item.setFont(font)


DONE_SCORE = -1e8  # scores at or below: transformers' −1e9 "no live beam here"


def score_text(score: float) -> str:
    """A live beam's score; transformers marks beams of a finished search with −1e9."""
    return "— (search done)" if score <= -1e8 else f"{score:.3f}"
