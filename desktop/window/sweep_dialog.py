"""Compare → Patching sweep… (and the What-if pane's button): the causal tracing map.

A clean prompt (the prompt box's by default), a corrupted one with as many tokens, and a metric
(the answer token's probability, or its logit minus another token's). The sweep runs on the
model thread (``controller.sweep``) with a progress bar and Cancel; the maps draw when it ends
(:class:`~llm_lens.desktop.panes.sweep.maps.SweepMaps`), and a click on a cell adds that patch
to the What-if list for the next run.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from llm_lens.desktop.panes.sweep.maps import TEACHING, SweepMaps
from llm_lens.desktop.state.sweep import SweepAsk, SweepMap

HINT = (
    "The corrupted prompt is the clean one with a word or two changed (as many tokens). The "
    "metric is read at the last position: the answer token's probability, or its logit minus "
    "the other token's (empty answer: the clean prompt's top token). A word after a space is "
    "usually a token that starts with one: ' Paris', not 'Paris'."
)
ERROR_STYLE = "QLabel { color: #e07070; }"


class SweepDialog(QDialog):
    """The sweep's inputs, progress and Cancel, its maps, and their export."""

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.setWindowTitle("Patching sweep (causal tracing)")
        self.setWindowFlag(Qt.WindowType.Window)  # a window of its own beside the main one
        self.window_ = window
        self.runner = window.controller.sweep
        self.maps = SweepMaps()
        self.maps.sig_cell_clicked.connect(self.runner.apply)
        self._build()
        self.runner.sig_started.connect(self._on_started)
        self.runner.sig_progress.connect(self._on_progress)
        self.runner.sig_finished.connect(self._on_finished)
        self.runner.sig_error.connect(self.show_error)
        self.runner.sig_applied.connect(self._on_applied)
        window.controller.sig_model_loaded.connect(self._on_model_loaded)
        if self.runner.last is not None:
            self._on_finished(self.runner.last)

    def _build(self) -> None:
        self.clean = QLineEdit(placeholderText="The Eiffel Tower is in the city of")
        self.corrupt = QLineEdit(placeholderText="The Colosseum is in the city of")
        self.target = QLineEdit(placeholderText="answer token, e.g. ' Paris' (empty: the top one)")
        self.other = QLineEdit(placeholderText="optional: ' Rome' (logit difference)")
        self.chat = QCheckBox("Chat template", checked=True)
        form = QFormLayout()
        form.addRow("Clean prompt", self.clean)
        form.addRow("Corrupted prompt", self.corrupt)
        metric = QHBoxLayout()
        metric.addWidget(self.target, 1)
        metric.addWidget(QLabel("minus"))
        metric.addWidget(self.other, 1)
        metric.addWidget(self.chat)
        form.addRow("Metric", metric)
        self.run_button = QPushButton("Run sweep")
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel", enabled=False)
        self.cancel_button.clicked.connect(self.runner.cancel)
        self.try_button = QPushButton("Run corrupted with What-if", enabled=False)
        self.try_button.setToolTip(
            "Put the corrupted prompt in the prompt box and run it under the What-if list's "
            "changes (a clicked cell's patch among them): does the clean answer come back?"
        )
        self.try_button.clicked.connect(self.run_corrupted)
        self.progress = QProgressBar(textVisible=True)
        self.progress.setFormat("%v / %m cells")
        self.status = QLabel(HINT, wordWrap=True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row = QHBoxLayout()
        row.addWidget(self.run_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.progress, 1)
        row.addWidget(self.try_button)
        for suffix in ("PNG", "SVG", "CSV"):
            button = QPushButton(f"Export {suffix}…")
            button.clicked.connect(lambda _c=False, s=suffix: self.export_dialog(s))
            row.addWidget(button)
        teaching = QLabel(TEACHING, wordWrap=True)
        teaching.setStyleSheet("QLabel { color: #9aa; }")
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(self.maps, 1)
        layout.addWidget(teaching)

    def fill_from_prompt(self) -> None:
        """The clean prompt and chat setting from the prompt box, where none is typed yet."""
        panel = getattr(self.window_, "prompt_panel", None)
        if panel is None:
            return
        if not self.clean.text().strip():
            self.clean.setText(panel.editor.toPlainText().strip())
        self.chat.setChecked(panel.chat_box.isChecked())

    def ask(self) -> SweepAsk:
        return SweepAsk(self.clean.text(), self.corrupt.text(), self.chat.isChecked(),
                        self.target.text(), self.other.text())  # fmt: skip

    def start(self) -> None:
        """Send the sweep to the model thread (a bad input: one line, nothing sent)."""
        if self.runner.request(self.ask()):
            self._running(True)
            self.progress.setRange(0, 0)  # busy until the first count arrives
            self.status.setStyleSheet("")
            self.status.setText("tokenizing and recording the two plain runs…")

    def _running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)

    def _on_started(self, tokens: Any) -> None:
        clean, _corrupt = tokens
        self._running(True)
        self.status.setText(f"patching {len(clean)} positions and every head of every layer…")

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)

    def run_corrupted(self) -> None:
        """The swept corrupted prompt into the prompt box, run under the What-if changes."""
        sweep = self.maps.sweep
        panel = getattr(self.window_, "prompt_panel", None)
        if sweep is None or panel is None:
            return
        panel.editor.setPlainText(sweep.ask.corrupt)
        panel.chat_box.setChecked(sweep.ask.chat)
        panel.run()

    def _on_finished(self, sweep: SweepMap) -> None:
        self._running(False)
        self.try_button.setEnabled(True)
        self.maps.show_sweep(sweep)
        self.status.setStyleSheet("")
        self.status.setText(
            f"clean: {sweep.ask.clean!r} · corrupted: {sweep.ask.corrupt!r} · metric "
            f"{sweep.metric_text}. Click a cell to add its patch to the What-if list."
        )

    def _on_model_loaded(self, _info: Any) -> None:
        """The maps were of the model before: they go (a click would patch another model)."""
        self.try_button.setEnabled(False)
        if self.maps.sweep is not None:
            self.maps.clear()
            self.status.setStyleSheet("")
            self.status.setText("a new model is loaded: run the sweep again for its maps")

    def show_error(self, message: str) -> None:
        self._running(self.runner.running >= 0)
        if self.runner.running < 0:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
        self.status.setStyleSheet(ERROR_STYLE)
        self.status.setText(message.splitlines()[0] if message else "")

    def _on_applied(self, what: str) -> None:
        self.status.setStyleSheet("")
        self.status.setText(
            f"added to What if?: {what}. Run the corrupted prompt with it (the button above) "
            "to see how much of the clean answer it brings back."
        )

    def export_dialog(self, suffix: str) -> None:
        """Ask where, then write the maps as ``suffix`` (PNG, SVG or CSV)."""
        if self.maps.sweep is None:
            self.show_error("run a sweep first: there is no map to export")
            return
        path, _ = QFileDialog.getSaveFileName(
            self, "Export the sweep", f"patching-sweep.{suffix.lower()}",
            f"{suffix} (*.{suffix.lower()})",
        )  # fmt: skip
        if path:
            self.export(path)

    def export(self, path: str) -> None:
        try:
            self.maps.export(path)
        except OSError as exc:
            self.show_error(f"could not write {path}: {exc}")


def open_sweep_dialog(window: QWidget) -> SweepDialog:
    """The window's sweep dialog (made once, kept), shown and raised, its clean prompt filled
    from the prompt box where empty."""
    dialog = window.findChild(SweepDialog)
    if dialog is None:
        dialog = SweepDialog(window)
        size = window.size()
        dialog.resize(min(1280, int(size.width() * 0.9)), min(860, int(size.height() * 0.9)))
    dialog.fill_from_prompt()
    dialog.show()
    dialog.raise_()
    dialog.activateWindow()
    return dialog
