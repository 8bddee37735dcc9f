"""desktop.teaching.guide: tooltips on every control that changes what the model does, labels
that name units and metrics."""

from __future__ import annotations

from types import SimpleNamespace

import pyqtgraph as pg
from PySide6.QtWidgets import QCheckBox, QPushButton, QSpinBox

from llm_lens.desktop.teaching.guide import (
    PROMPT_TIPS,
    SAMPLING_TIPS,
    add_legends,
    apply_tooltips,
    cosine_label,
)


def test_a_neighbour_line_names_its_metric():
    assert cosine_label(0.67251, "·bank", 4567) == "cosine 0.673  ·bank  (4567)"


def test_tooltips_reach_the_prompt_and_sampling_controls(qtbot):
    panel = SimpleNamespace(
        max_tokens=QSpinBox(), chat_box=QCheckBox(), run_button=QPushButton()
    )  # a panel without some controls: those are skipped
    controls = SimpleNamespace(**{name: QSpinBox() for name in SAMPLING_TIPS})
    sampling = SimpleNamespace(controls=controls)
    window = SimpleNamespace(prompt_panel=panel, panes={"Sampling": sampling})
    apply_tooltips(window)
    assert panel.max_tokens.toolTip() == PROMPT_TIPS["max_tokens"]
    assert panel.run_button.toolTip() == PROMPT_TIPS["run_button"]
    assert "chat template" in panel.chat_box.toolTip()
    for name, tip in SAMPLING_TIPS.items():
        assert getattr(controls, name).toolTip() == tip


def test_legends_name_the_sampling_and_positions_axes(qtbot):
    plots = {"raw": pg.PlotItem(), "top_k": pg.PlotItem()}
    positions = SimpleNamespace(
        freq_plot=pg.PlotItem(), score_plot=pg.PlotItem(), angle_plot=pg.PlotItem()
    )
    add_legends({"Sampling": SimpleNamespace(plots=plots), "Positions": positions})
    assert all(p.getAxis("bottom").labelText == "probability" for p in plots.values())
    assert positions.freq_plot.getAxis("left").labelText == "rad / token"
    assert positions.score_plot.getAxis("left").labelText == "q·k (relative)"
    assert positions.angle_plot.titleLabel.text == "angle mod 2π (rad)"
