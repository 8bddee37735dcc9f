"""What if? on a residual cell: "patch from another prompt…" and "add the steering vector…".

A right-click on a cell of the residual stream (the Layer stack's rows) offers these two beside
the plain changes; each opens a small :class:`ResidualDialog` and, accepted, adds a
``ResidualPatch`` (the same places read from another prompt, on the model thread) or a
``ResidualAdd`` (a ``.npy`` vector times a strength) to the What-if list.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QWidget,
)

from llm_lens.core.errors import LensError
from llm_lens.core.interventions.specs import positions as parse_positions

PATCH_LABEL = "patch from another prompt…"
ADD_LABEL = "add the steering vector…"


class DialogChange(NamedTuple):
    """A What-if menu entry that asks for more before it adds a change: ``open()`` shows its
    dialog (the menu shows ``label``)."""

    label: str
    open: Callable[[], Any]


class ResidualDialog(QDialog):
    """The stream entering layer ``layer`` at some positions: patched from another prompt
    (``kind="patch"``) or pushed by a vector from a ``.npy`` file (``kind="add"``)."""

    def __init__(self, kind: str, layer: int, position: int, parent: QWidget | None = None):
        super().__init__(parent)
        self.kind, self.layer = kind, layer
        self.setWindowTitle(PATCH_LABEL if kind == "patch" else ADD_LABEL)
        form = QFormLayout(self)
        form.addRow(QLabel(f"the residual stream entering layer {layer}"))
        self.positions = QLineEdit(str(position))
        self.positions.setToolTip("Positions counted from 0: 3, 3-5 or 1,4 (empty: every one)")
        form.addRow("positions", self.positions)
        self.prompt, self.path = QLineEdit(), QLineEdit()
        self.strength = QDoubleSpinBox(minimum=-100.0, maximum=100.0, value=4.0, singleStep=0.5)
        if kind == "patch":
            self.prompt.setPlaceholderText("another prompt, e.g. The capital of Italy is")
            form.addRow("from the prompt", self.prompt)
        else:
            browse = QPushButton("…")
            browse.clicked.connect(self._browse)
            row = QHBoxLayout()
            row.addWidget(self.path, 1)
            row.addWidget(browse)
            form.addRow("vector (.npy)", row)
            form.addRow("strength", self.strength)
        self.error = QLabel(wordWrap=True, visible=False)
        self.error.setStyleSheet("QLabel { color: #d93025; }")
        form.addRow(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)  # fmt: skip
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Steering vector", "", "NumPy (*.npy)")
        if path:
            self.path.setText(path)

    def chosen_positions(self) -> tuple[int, ...] | None:
        """The positions typed, or None (and the message shown) when they do not parse."""
        try:
            return parse_positions(self.positions.text().strip() or None)
        except (LensError, ValueError) as exc:
            self.show_error(f"positions: {exc}")
            return None

    def show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(True)

    def apply(self, whatif: Any, chat: bool) -> bool:
        """Add the change to ``whatif`` (a ``WhatIfList``); False, with the reason shown in the
        dialog, when the input is not usable (the dialog stays open)."""
        wanted = self.chosen_positions()
        if wanted is None:
            return False
        if self.kind == "patch":
            text = self.prompt.text()
            if not text.strip():
                self.show_error("type the prompt to patch from")
                return False
            if not wanted:
                self.show_error("name the positions to patch (a patch needs places)")
                return False
            whatif.request_patch(text, chat, self.layer, wanted)
            return True
        errors: list[str] = []
        whatif.sig_error.connect(errors.append)
        try:
            ok = bool(
                whatif.add_vector(self.path.text(), self.strength.value(), self.layer, wanted)
            )
        finally:
            whatif.sig_error.disconnect(errors.append)
        if not ok:
            self.show_error(errors[-1] if errors else "the vector could not be read")
        return ok

    def accept(self) -> None:  # noqa: D102 - Qt's, gated on apply by the opener
        if self.on_accept is None or self.on_accept(self):
            super().accept()

    on_accept: Callable[[ResidualDialog], bool] | None = None


def residual_offers(parent: QWidget, controller: Any, shape: Any, x: float, y: float
                    ) -> list[DialogChange]:  # fmt: skip
    """The two dialog entries of the residual cell at view point (``x``, ``y``) of a (rows,
    positions) heatmap whose row r is the stream entering layer r (the last row, the final
    stream, enters none: no entry); the other prompt is read in the shown prompt's chat mode."""
    row, position = int(math.floor(y)), int(math.floor(x))
    if shape is None or not (0 <= row < shape[0] - 1 and 0 <= position < shape[1]):
        return []
    prompt = controller.prompt
    chat = bool(prompt.chat) if prompt is not None else False

    def opener(kind: str) -> Callable[[], ResidualDialog]:
        def open_dialog() -> ResidualDialog:
            dialog = ResidualDialog(kind, row, position, parent)
            dialog.on_accept = lambda d: d.apply(controller.whatif, chat)
            dialog.open()
            return dialog

        return open_dialog

    return [DialogChange(PATCH_LABEL, opener("patch")), DialogChange(ADD_LABEL, opener("add"))]
