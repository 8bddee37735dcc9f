"""One editable sampling configuration per row: a preset and every setting, seed included, and
whether the column runs clean or with the What-if changes.

The spin boxes accept out-of-range values on purpose (a negative temperature, top-p above 1): the
compare view turns the settings' own validation message into an inline note, never a dialog.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSignalBlocker, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QLabel,
    QSpinBox,
    QToolButton,
    QWidget,
)

from llm_lens.core.cli.compare import NEUTRAL, PRESETS
from llm_lens.core.sampling import SamplingParams
from llm_lens.desktop.teaching.guide import SAMPLING_TIPS
from llm_lens.desktop.widgets.common import FlowLayout, group

CUSTOM = "custom"
PRESET_LABELS = {
    "factual": "factual: T 0.2, top-p 0.95",
    "creative": "creative: T 0.9, top-p 0.9",
    "greedy": "greedy",
    "wild": "wild: T 1.2",
    CUSTOM: "custom",
}
# (field, prefix, low, high, step, decimals); decimals None: an integer box
FIELDS: tuple[tuple[str, str, float, float, float, int | None], ...] = (
    ("temperature", "T ", -10.0, 10.0, 0.1, 2),
    ("top_k", "top-k ", -100, 100_000, 1, None),
    ("top_p", "top-p ", -1.0, 2.0, 0.05, 2),
    ("min_p", "min-p ", -1.0, 2.0, 0.05, 2),
    ("repetition_penalty", "rep ", -1.0, 10.0, 0.05, 2),
    ("seed", "seed ", -1, 2**31 - 1, 1, None),
)


def preset_values(name: str) -> dict[str, Any]:
    """Every setting of a preset, over the neutral ones (as ``llm-lens compare`` reads it)."""
    return {**NEUTRAL, **PRESETS[name]}


def describe_params(params: SamplingParams) -> str:
    """A column header for sampler settings: the preset they equal, or each active setting."""
    import dataclasses

    v = dataclasses.asdict(params)
    for name in PRESETS:
        values = {"greedy": name == "greedy", **preset_values(name), "seed": params.seed}
        preset = SamplingParams(**values)
        if preset == params:
            return f"{PRESET_LABELS[name]} · seed {v['seed']}"
    parts = ["greedy"] if params.greedy else [f"T {v['temperature']:g}"]
    parts += [f"top-k {v['top_k']}"] if v["top_k"] else []
    parts += [f"top-p {v['top_p']:g}"] if v["top_p"] != 1 else []
    parts += [f"min-p {v['min_p']:g}"] if v["min_p"] else []
    parts += [f"rep {v['repetition_penalty']:g}"] if v["repetition_penalty"] != 1 else []
    return " · ".join([*parts, f"seed {v['seed']}"])


class SamplerRow(QWidget):
    """A preset combo and the six settings of one configuration, wrapping onto more lines when the
    view is narrower than all of them (a :class:`FlowLayout`).

    Signals:
        sig_remove(): the row's × button was pressed.
        sig_changed(): a setting or the preset changed.
    """

    sig_remove = Signal()
    sig_changed = Signal()

    def __init__(self, number: int, preset: str = "factual", parent: QWidget | None = None):
        super().__init__(parent)
        self.number = QLabel(f"#{number}")
        self.preset = QComboBox()
        self.preset.setToolTip("A named set of sampling settings; editing one makes it custom")
        for name, label in PRESET_LABELS.items():
            self.preset.addItem(label, name)
        self.boxes: dict[str, QSpinBox | QDoubleSpinBox] = {}
        layout = FlowLayout(self)  # one line where it fits (~870 px), wrapped on a laptop
        layout.addWidget(group(self.number, self.preset))
        for name, prefix, low, high, step, decimals in FIELDS:
            box: QSpinBox | QDoubleSpinBox
            if decimals is None:
                box = QSpinBox(minimum=int(low), maximum=int(high), singleStep=int(step))
            else:
                box = QDoubleSpinBox(minimum=low, maximum=high, singleStep=step, decimals=decimals)
            box.setPrefix(prefix)
            box.setToolTip(SAMPLING_TIPS.get(name, name.replace("_", " ")))
            box.valueChanged.connect(self._on_edited)
            self.boxes[name] = box
            layout.addWidget(box)
        self.whatif = QCheckBox("What-if")
        self.whatif.setToolTip(
            "Run this column with the What-if changes switched on (unchecked: the clean model)"
        )
        self.whatif.toggled.connect(self.sig_changed)
        layout.addWidget(self.whatif)
        self.remove = QToolButton(text="×", toolTip="remove this configuration")
        self.remove.clicked.connect(self.sig_remove)
        layout.addWidget(self.remove)
        self.preset.currentIndexChanged.connect(self._on_preset)
        self.set_preset(preset)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt override)
        """Ask for the height the wrapped lines need: a box layout gives a child its minimum
        height, not its height for its width, so wrapped lines would overlap when space is short."""
        super().resizeEvent(event)
        layout = self.layout()
        if layout is not None:
            self.setMinimumHeight(layout.heightForWidth(self.width()))

    def set_number(self, number: int) -> None:
        self.number.setText(f"#{number}")

    def preset_name(self) -> str:
        return str(self.preset.currentData())

    def set_preset(self, name: str) -> None:
        """Select a preset and fill in its settings (the seed is kept)."""
        with QSignalBlocker(self.preset):
            self.preset.setCurrentIndex(list(PRESET_LABELS).index(name))
        if name != CUSTOM:
            self.set_values(preset_values(name), keep_seed=True)
        self.sig_changed.emit()

    def set_values(self, values: dict[str, Any], keep_seed: bool = False) -> None:
        for name, box in self.boxes.items():
            if name in values and not (keep_seed and name == "seed"):
                with QSignalBlocker(box):
                    box.setValue(values[name])

    def values(self) -> dict[str, Any]:
        return {name: box.value() for name, box in self.boxes.items()}

    def params(self) -> SamplingParams:
        """The settings; raises ``SamplingError`` with a plain message when one is out of range."""
        values = self.values()
        return SamplingParams(**values, greedy=self.preset_name() == "greedy")

    def with_whatif(self) -> bool:
        """Whether this column runs with the What-if changes (else clean)."""
        return self.whatif.isChecked()

    def _on_preset(self, _index: int) -> None:
        self.set_preset(self.preset_name())

    def _on_edited(self, _value: object) -> None:
        """An edit keeps the preset only while every setting still equals it."""
        values = {k: v for k, v in self.values().items() if k != "seed"}
        match = next(
            (n for n in PRESETS if all(preset_values(n)[k] == v for k, v in values.items())),
            CUSTOM,
        )
        with QSignalBlocker(self.preset):
            self.preset.setCurrentIndex(list(PRESET_LABELS).index(match))
        self.sig_changed.emit()
