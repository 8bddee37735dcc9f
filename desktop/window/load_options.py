"""How the window opens a model bigger than one device: File → Open model with placement….

:class:`PlacementDialog` asks for the model and for the same choices as the command line's
``--device-map``, ``--max-memory``, ``--quantize`` and ``--allow-partly-random``; the text is
read by core's own parser (:func:`~llm_lens.core.placement.parse_placement`), so a malformed
value is that parser's one line, in red in the dialog, and the dialog stays open. What it
accepts becomes the window's choice for every model opened afterwards (the other Open actions
too), as the command line's flags do.

:func:`partly_random_mark` is the status bar's warning for a model loaded with random weights.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core.errors import LensError
from llm_lens.core.placement import DEVICE_MAPS, MAX_MEMORY_HELP, QUANTIZE, Placement

NONE = "none"
ERROR_STYLE = "QLabel { background: #b3261e; color: white; padding: 4px; }"
WARNING_STYLE = "QLabel { background: #b3261e; color: white; padding: 0 4px; }"
PARTLY_RANDOM_TIP = (
    "This model's files lack weights its config needs (or hold others): those were initialised "
    "at random, so its numbers are not the trained model's. Every saved file says so."
)
ERROR_CHARS = 110  # the dialog's width; the whole line is the tooltip
MARK_CHARS = 64  # the status bar's share; the whole list is the tooltip
QUANTIZE_TIP = "int8, int4: optimum-quanto (CPU, CUDA, MPS); nf4: bitsandbytes (CUDA only)"


class PlacementDialog(QDialog):
    """The model to open (empty: the bundled one) and where and how its weights go.

    ``result_placement`` and ``allow_partly_random`` hold the accepted choice."""

    def __init__(
        self,
        spec: str | None,
        placement: Placement | None,
        allow_partly_random: bool,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open model with placement")
        place = placement or Placement()
        self.model = QLineEdit(spec or "", placeholderText="the bundled model")
        self.model.setToolTip("a model folder, a .gguf file or a hub id")
        self.device_map = _combo(DEVICE_MAPS, place.device_map)
        self.device_map.setToolTip(
            "accelerate's device map: the layers over the GPUs, then the CPU, then (last) disk"
        )
        self.max_memory = QLineEdit(_caps_text(place), placeholderText="cpu=2GiB,cuda:0=20GiB")
        self.max_memory.setToolTip(MAX_MEMORY_HELP)
        self.quantize = _combo(QUANTIZE, place.quantize)
        self.quantize.setToolTip(QUANTIZE_TIP)
        self.partly = QCheckBox("Allow missing weights (random, marked \u201cpartly random\u201d)")
        self.partly.setChecked(allow_partly_random)
        self.error = QLabel(visible=False, wordWrap=False)
        self.error.setStyleSheet(ERROR_STYLE)
        self.result_placement: Placement | None = placement
        self.allow_partly_random = allow_partly_random
        self._lay_out()

    def _lay_out(self) -> None:
        form = QFormLayout()
        form.addRow("Model:", self.model)
        form.addRow("Device map:", self.device_map)
        form.addRow("Max memory:", self.max_memory)
        form.addRow("Weights:", self.quantize)
        note = QLabel("Used for every model opened from now on.")
        note.setToolTip("as the command line's --device-map, --max-memory, --quantize and "
                        "--allow-partly-random are")  # fmt: skip
        note.setEnabled(False)  # the palette's quieter text
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.open_button = buttons.button(QDialogButtonBox.StandardButton.Open)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.partly)
        layout.addWidget(note)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        self.setMinimumWidth(460)

    def spec(self) -> str | None:
        """The model asked for: None for the bundled one."""
        return self.model.text().strip() or None

    def read(self) -> Placement:
        """The fields as a Placement, by core's parser; a mistake is its LensError line."""
        from llm_lens.core.placement import parse_placement

        chosen = (self.device_map.currentText(), self.quantize.currentText())
        device_map, quantize = (None if c == NONE else c for c in chosen)
        return parse_placement(device_map, self.max_memory.text().strip() or None, quantize)

    def accept(self) -> None:  # noqa: D102 (QDialog's): refused with one red line, not closed
        try:
            placement = self.read()
        except LensError as exc:
            line = str(exc).replace("\n", " ").replace("--max-memory", "Max memory")
            cut = line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "\u2026"
            self.error.setText(cut)  # a pasted page of text must not widen the dialog
            self.error.setToolTip(line)
            self.error.setVisible(True)
            return
        self.error.setVisible(False)
        self.result_placement = placement if placement != Placement() else None
        self.allow_partly_random = self.partly.isChecked()
        super().accept()


def _combo(choices: tuple[str, ...], current: str | None) -> QComboBox:
    box = QComboBox()
    box.addItems([NONE, *choices])
    box.setCurrentText(current or NONE)
    return box


def _caps_text(place: Placement) -> str:
    """The caps as the user would type them (bytes: exact, no rounding)."""
    return ",".join(f"{device}={size}B" for device, size in place.max_memory)


def partly_random_mark(parent: QWidget | None = None) -> QLabel:
    """The status bar's warning, hidden until a partly random model is loaded."""
    label = QLabel(parent)
    label.setVisible(False)
    label.setStyleSheet(WARNING_STYLE)
    label.setToolTip(PARTLY_RANDOM_TIP)
    return label


def show_partly_random(label: QLabel, info: Any) -> None:
    """Show "partly random: …" (what is random) for ``info``, a ModelInfo; hide it otherwise."""
    text = str(getattr(info, "partly_random", "") or "")
    short = text if len(text) <= MARK_CHARS else text[: MARK_CHARS - 1].rstrip() + "…"
    label.setText(f" {short} " if text else "")
    label.setToolTip(f"{text}\n\n{PARTLY_RANDOM_TIP}" if text else PARTLY_RANDOM_TIP)
    label.setVisible(bool(text))
