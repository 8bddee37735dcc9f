"""The sampling settings as widgets (the Sampling pane's controls)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QDoubleSpinBox, QLabel, QSlider, QSpinBox, QWidget

from llm_lens.core.sampling import SamplingParams
from llm_lens.desktop.widgets.common import FlowLayout, group


def _double(low: float, high: float, step: float, decimals: int) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setDecimals(decimals)
    box.setKeyboardTracking(False)
    return box


class SamplingControls(QWidget):
    """The sampling settings as widgets; ranges allow invalid values so errors show inline.

    Signals:
        sig_edited(): the user changed a control.
    """

    sig_edited = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.temp_slider = QSlider(Qt.Orientation.Horizontal)
        self.temp_slider.setRange(0, 200)
        self.temperature = _double(0.0, 2.0, 0.05, 2)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 49152)
        self.top_k.setSpecialValueText("off")
        self.top_p = _double(0.0, 1.0, 0.01, 3)
        self.min_p = _double(0.0, 1.0, 0.01, 3)
        self.repetition_penalty = _double(0.0, 5.0, 0.05, 2)
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.greedy = QCheckBox("greedy")
        for box in (self.top_k, self.seed):
            box.setKeyboardTracking(False)
        self._lay_out()
        self.temp_slider.valueChanged.connect(lambda v: self.temperature.setValue(v / 100))
        self.temperature.valueChanged.connect(self._sync_slider)
        for box in (
            self.temperature,
            self.top_k,
            self.top_p,
            self.min_p,
            self.repetition_penalty,
            self.seed,
        ):
            box.valueChanged.connect(self.sig_edited)
        self.greedy.toggled.connect(self.sig_edited)

    def _lay_out(self) -> None:
        """Label-and-box groups that wrap onto more lines in a narrow pane."""
        self.temp_slider.setMinimumWidth(80)
        flow = FlowLayout(self)
        flow.addWidget(
            group(QLabel("temperature (0 = greedy)"), self.temp_slider, self.temperature)
        )
        for label, box in (
            ("top-k", self.top_k),
            ("top-p", self.top_p),
            ("min-p", self.min_p),
            ("repetition penalty", self.repetition_penalty),
            ("seed", self.seed),
        ):
            flow.addWidget(group(QLabel(label), box))
        flow.addWidget(self.greedy)

    def _sync_slider(self, value: float) -> None:
        self.temp_slider.blockSignals(True)
        self.temp_slider.setValue(round(value * 100))
        self.temp_slider.blockSignals(False)

    def read(self) -> SamplingParams:
        """The settings shown; raises SamplingError for an invalid combination."""
        seed = self.seed.value()
        return SamplingParams(
            temperature=self.temperature.value(),
            top_k=self.top_k.value(),
            top_p=self.top_p.value(),
            min_p=self.min_p.value(),
            repetition_penalty=self.repetition_penalty.value(),
            seed=None if seed < 0 else seed,
            greedy=self.greedy.isChecked(),
        )

    def reflect(self, params: SamplingParams) -> None:
        """Show ``params`` without emitting sig_edited."""
        values = (
            (self.temperature, params.temperature),
            (self.top_k, params.top_k),
            (self.top_p, params.top_p),
            (self.min_p, params.min_p),
            (self.repetition_penalty, params.repetition_penalty),
            (self.seed, -1 if params.seed is None else params.seed),
        )
        for box, value in values:
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)
        self._sync_slider(params.temperature)
        self.greedy.blockSignals(True)
        self.greedy.setChecked(params.greedy)
        self.greedy.blockSignals(False)
