"""Positions pane: rotary position embedding (RoPE) exactly as the loaded model applies it.

Every query and key is rotated pair by pair by ``position × inv_freq``; the frequencies come
from the model's head size and ``rope_theta``, so the plots change when another model loads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from llm_lens.core.positions import RopeView, rope_view
from llm_lens.desktop.controller import Controller
from llm_lens.desktop.panes.attention import visible_text
from llm_lens.desktop.panes.base import Pane

EMPTY_POSITIONS = 64  # positions drawn before any prompt exists
NOTES = {
    "learned": "This model uses learned positions; RoPE view not applicable.",
    "none": "This model adds no position information to its tokens; RoPE view not applicable.",
}


class PositionsPane(Pane):
    """Frequency of each dimension pair, its angle at each prompt position, score vs distance."""

    title = "Positions"

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.view: RopeView | None = None
        self._key: tuple[Any, ...] | None = None
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.graphics = pg.GraphicsLayoutWidget()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.summary)
        layout.addWidget(self.graphics, 1)
        self._build_plots()

    def _build_plots(self) -> None:
        g = self.graphics
        self.angle_plot = g.addPlot(row=0, col=0, rowspan=2, title="angle mod 2π")
        self.angle_plot.invertY(True)
        self.angle_plot.setLabel("bottom", "dimension pair")
        self.angle_plot.setMenuEnabled(False)
        self.angles = pg.ImageItem(axisOrder="row-major")
        self.angle_plot.addItem(self.angles)
        bar = pg.ColorBarItem(
            values=(0, 2 * math.pi), colorMap="CET-C1", interactive=False, width=10
        )
        bar.setImageItem(self.angles, insert_in=self.angle_plot)
        self.freq_plot = g.addPlot(row=0, col=1, title="rotation frequency (rad / token)")
        self.freq_plot.setLogMode(False, True)
        self.freq_plot.setLabel("bottom", "dimension pair")
        self.freq_curve = self.freq_plot.plot(pen=None, symbol="o", symbolSize=4)
        self.score_plot = g.addPlot(row=1, col=1, title="q·k of equal vectors vs distance")
        self.score_plot.setLabel("bottom", "distance (tokens)")
        self.score_curve = self.score_plot.plot(pen=pg.mkPen("y", width=1.5))
        g.ci.layout.setColumnStretchFactor(0, 1)
        g.ci.layout.setColumnStretchFactor(1, 1)

    # ----------------------------------------------------------------- render
    def render(self, step: Any) -> None:
        """Recompute only when the model or the prompt changes: RoPE does not depend on steps."""
        ctl = self.controller
        info = ctl.info
        if info is None:
            return
        prompt = ctl.prompt
        key = (info.weights_id, info.position_kind, None if prompt is None else prompt.ids)
        if key == self._key:
            return
        self._key = key
        if info.position_kind != "rope" or not info.rope_theta:
            self._show_note(NOTES.get(info.position_kind, NOTES["none"]))
            return
        n_positions = len(prompt) if prompt is not None else EMPTY_POSITIONS
        self.view = rope_view(info.head_dim, float(info.rope_theta), n_positions)
        self.graphics.setVisible(True)
        self._draw(self.view, prompt)
        self.summary.setText(self._summary_text(info, self.view))

    def _draw(self, view: RopeView, prompt: Any) -> None:
        pairs = np.arange(view.inv_freq.shape[0], dtype=np.float64)
        self.freq_curve.setData(pairs, view.inv_freq)
        self.score_curve.setData(view.distances, view.score_vs_distance)
        self.angles.setImage(view.angles, levels=(0.0, 2 * math.pi))
        rows, cols = view.angles.shape
        self.angle_plot.setRange(xRange=(0, cols), yRange=(0, rows), padding=0)
        self.angle_plot.setLabel("left", "prompt position" if prompt is not None else "position")
        if prompt is None:
            self.angle_plot.getAxis("left").setTicks(None)
            return
        labels = [f"{i} {visible_text(t.text, 8)}" for i, t in enumerate(prompt.tokens)]
        every = max(
            1, math.ceil(len(labels) * 14 / max(self.angle_plot.getViewBox().height(), 150))
        )
        ticks = [(i + 0.5, labels[i]) for i in range(0, len(labels), every)]
        self.angle_plot.getAxis("left").setTicks([ticks])

    @staticmethod
    def _summary_text(info: Any, view: RopeView) -> str:
        waves = 2 * np.pi / view.inv_freq.astype(np.float64)
        return (
            f"RoPE, θ = {info.rope_theta:g}, head_dim = {info.head_dim}, "
            f"{view.inv_freq.shape[0]} dimension pairs. Wavelength (2π / frequency): "
            f"fastest pair {waves.min():.3g} tokens, slowest pair {waves.max():.3g} tokens."
        )

    def _show_note(self, note: str) -> None:
        self.view = None
        self.graphics.setVisible(False)
        self.summary.setText(note)

    # ----------------------------------------------------------------- clear / export
    def clear(self) -> None:
        """Drop the cache key so the next render redraws for the new prompt or model."""
        self._key = None

    def plot_items(self) -> list[Any]:
        return [self.graphics.scene()] if self.view is not None else []

    def csv_table(self) -> tuple[Sequence[str], Sequence[Sequence[Any]]]:
        if self.view is None:
            return ("pair", "inv_freq", "wavelength"), []
        inv = self.view.inv_freq.astype(np.float64)
        rows = [(i, float(f), float(2 * np.pi / f)) for i, f in enumerate(inv)]
        return ("pair", "inv_freq", "wavelength"), rows
