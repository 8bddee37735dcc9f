"""What-if pane: the interventions the next run is made under, each with an on/off switch and a
remove button, "Run with these", and what the shown run changed against the clean run.

Interventions come from right-clicks in the other panes (a head, a layer, an expert, a token:
``Pane.context_targets``) or typed as the CLI's SPEC strings (``head:7.4=0``, ``mlp:12*0.5``,
``forget:3``). They are data in ``controller.whatif``
(:class:`~llm_lens.desktop.state.whatif.WhatIfList`); the model thread applies them through
``llm_lens.core.interventions``.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core import cards as ex
from llm_lens.core.errors import LensError
from llm_lens.core.interventions import Forget, parse_spec, to_spec
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.whatif import describe, forget_note, mark_text
from llm_lens.desktop.widgets.pane import Pane
from llm_lens.desktop.widgets.token_text import piece_label

HINT = (
    "Right-click a head (Attention's head grid, Why this token?), a layer (Layer stack), an "
    "expert (Experts) or a token (Tokens) to add a change, or type one below."
)
INTERVENED_STYLE = "QLabel { background: #5a2d82; color: white; padding: 2px 6px; }"


class WhatIfPane(Pane):
    """The What-if list with switches, and the shown run's change against the clean run."""

    title = "What if?"
    capability = "interventions"  # a served run has none: the note says so (Pane.missing_line)
    empty_text = (
        "What if a head, a layer, an expert or a token were changed? Run a prompt (Ctrl+Enter), "
        "then right-click one in another pane."
    )

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.whatif = controller.whatif
        self.shown_label = QLabel("clean run", wordWrap=True)
        self.shown_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.diff_label = QLabel("", wordWrap=True)
        self.diff_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = self._build_table()
        self.spec_edit = QLineEdit(placeholderText="head:7.4=0 · mlp:12*0.5 · forget:3")
        self.spec_edit.setToolTip("An intervention as llm-lens trace --intervene reads it")
        self.spec_edit.returnPressed.connect(self.add_spec)
        self.error_label = QLabel("", wordWrap=True)
        self.error_label.setStyleSheet("QLabel { color: #e07070; }")
        self.error_label.setVisible(False)
        self.run_button = QPushButton("Run with these")
        self.run_button.setToolTip("Run the prompt again under the interventions switched on")
        self.run_button.clicked.connect(self.whatif.request_run)
        self.off_button = QPushButton("All off")
        self.off_button.setToolTip("Switch every intervention off: the next run is the clean one")
        self.off_button.clicked.connect(self.all_off)
        self.sweep_button = QPushButton("Patching sweep…")
        self.sweep_button.setToolTip(
            "Map which layers, positions and heads carry a clean prompt's answer into a "
            "corrupted one; click a cell to add its patch here"
        )
        self.sweep_button.clicked.connect(controller.sweep.request_open)
        self._lay_out()
        self.whatif.sig_changed.connect(self.refresh_list)
        controller.sig_model_loaded.connect(lambda _i: self.refresh_list())  # forget's note
        controller.sig_run_started.connect(lambda _p: self._show_mark())
        controller.sig_session_changed.connect(self._show_mark)
        self.refresh_list()
        self._show_mark()

    def _build_table(self) -> QTableWidget:
        table = QTableWidget(0, 2)
        table.setHorizontalHeaderLabels(["intervention (on/off)", ""])
        table.verticalHeader().setVisible(False)
        table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        table.itemChanged.connect(self._on_item_changed)
        return table

    def _lay_out(self) -> None:
        add = QHBoxLayout()
        add.addWidget(self.spec_edit, 1)
        add_button = QPushButton("Add")
        add_button.clicked.connect(self.add_spec)
        add.addWidget(add_button)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.off_button)
        buttons.addWidget(self.sweep_button)
        buttons.addStretch(1)
        hint = QLabel(HINT, wordWrap=True)
        hint.setStyleSheet("QLabel { color: #9aa; }")
        layout = QVBoxLayout(self)
        layout.addWidget(self.shown_label)
        layout.addWidget(self.diff_label)
        layout.addWidget(self.table, 1)
        layout.addLayout(add)
        layout.addWidget(self.error_label)
        layout.addLayout(buttons)
        layout.addWidget(hint)

    # ----------------------------------------------------------------- the list
    def refresh_list(self) -> None:
        """One row per intervention: its switch and reading, and a remove button."""
        entries = self.whatif.entries
        with QSignalBlocker(self.table):
            self.table.setRowCount(len(entries))
            for row, entry in enumerate(entries):
                item = QTableWidgetItem(self.line(entry.intervention))
                item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable)
                item.setCheckState(Qt.CheckState.Checked if entry.on else Qt.CheckState.Unchecked)
                item.setToolTip(f"{item.text()}\n--intervene {to_spec(entry.intervention)}")
                self.table.setItem(row, 0, item)
                remove = QToolButton(text="✕", toolTip="Remove this intervention")
                remove.clicked.connect(lambda _c=False, r=row: self.whatif.remove(r))
                self.table.setCellWidget(row, 1, remove)
        active = len(self.whatif.active())
        self.run_button.setText(f"Run with these ({active})" if active else "Run clean")
        self.off_button.setEnabled(active > 0)

    def line(self, item: Any) -> str:
        """An intervention's row: its reading, and for a forgotten token on a hybrid model what
        the change cannot reach (the Mamba, DeltaNet or convolution layers' state)."""
        note = forget_note(self.controller.model_info) if isinstance(item, Forget) else ""
        return f"{describe(item)} · {note}" if note else describe(item)

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        if item.column() == 0:
            self.whatif.switch(item.row(), item.checkState() == Qt.CheckState.Checked)

    def all_off(self) -> None:
        for row in range(len(self.whatif.entries)):
            self.whatif.switch(row, False)

    def add_spec(self) -> None:
        """Add the SPEC typed in the line (one line under it says what is wrong with it)."""
        text = self.spec_edit.text().strip()
        if not text:
            return
        try:
            self.whatif.add(parse_spec(text))
        except LensError as exc:
            self.error_label.setText(str(exc))
            self.error_label.setVisible(True)
            return
        self.error_label.setText("")
        self.error_label.setVisible(False)
        self.spec_edit.clear()

    def rows(self) -> list[tuple[str, bool]]:
        """(reading, switched on) of each row, as drawn (tests read this)."""
        out = []
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            out.append((item.text(), item.checkState() == Qt.CheckState.Checked))
        return out

    # ----------------------------------------------------------------- the shown run
    def _show_mark(self) -> None:
        mark = mark_text(self.controller.interventions)
        self.shown_label.setText(f"the run shown is {mark}" if mark else "the run shown is clean")
        self.shown_label.setStyleSheet(INTERVENED_STYLE if mark else "")

    def render(self, step: Any) -> None:
        self._show_mark()
        self.diff_label.setText(self.difference(step))

    def difference(self, step: Any) -> str:
        """The selected step against the clean run's step that read the same context."""
        if step is None or not self.controller.interventions:
            return ""
        clean = self.whatif.clean_step(step)
        if clean is None and not self.whatif.has_clean(self.controller.prompt):
            return "no clean run of this prompt to compare with: switch the changes off and run"
        if clean is None:
            return (
                f"the clean run of this prompt read other tokens before step {step.index} (or "
                "stopped earlier): select an earlier step to compare"
            )
        before = _prob(clean, step.token.id)
        return (
            f"step {step.index}: chose {_label(step.token)} with p = {step.prob:.3f}; the clean "
            f"run gave it p = {before:.3f} and chose {_label(clean.token)} (p = {clean.prob:.3f})"
        )

    def explainer(self) -> ex.Explainer | None:
        ctl = self.controller
        step = ctl.current_step()
        changes = [describe(i) for i in ctl.interventions]
        clean = self.whatif.clean_step(step) if changes else None
        return ex.whatif_card(changes, step, clean)

    def clear(self) -> None:
        self.diff_label.setText("")

    def csv_table(self) -> tuple[list[str], list[list[Any]]]:
        return ["spec", "reading", "on"], [
            [to_spec(e.intervention), describe(e.intervention), e.on] for e in self.whatif.entries
        ]


def _label(token: Any) -> str:
    return repr(piece_label(token.text, token.raw, token.special))


def _prob(step: Any, token_id: int) -> float:
    """``token_id``'s probability in ``step``'s raw distribution (its full logits)."""
    import numpy as np

    logits = np.asarray(step.logits, np.float64)
    return float(np.exp(logits[token_id] - np.logaddexp.reduce(logits)))
