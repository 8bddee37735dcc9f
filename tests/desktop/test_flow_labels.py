"""The "Why this token?" flow graph's token labels never run together: as many as the axis'
width holds apart, at any width."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QFontMetricsF

from llm_lens.desktop.widgets.flow_view import FlowView
from llm_lens.desktop.widgets.token_text import LABEL_GAP, spaced_ticks


def test_spaced_ticks_keep_labels_apart():
    positions = list(range(40))
    widths = [48.0] * 40
    kept = spaced_ticks(positions, widths, px_per_unit=12.0)
    assert kept[0] == 0 and len(kept) < 40
    centres = [positions[i] * 12.0 for i in kept]
    assert all(b - a >= 48.0 + LABEL_GAP for a, b in zip(centres, centres[1:], strict=False))
    assert len(spaced_ticks(positions, widths, px_per_unit=60.0)) == 40  # room for every one


def _graph(n_tokens: int):
    """A flow graph over ``n_tokens`` positions: one residual edge per token and layer pair."""
    pos = np.repeat(np.arange(n_tokens), 4)
    level = np.tile(np.arange(4), n_tokens)
    words = ["fundamental", "building", "blocks", "transformer", "attention", "the", "model"]
    return SimpleNamespace(
        src_pos=pos, dst_pos=pos, src_level=level, dst_level=level + 1,
        kind=np.ones(pos.size, np.int64), weight=np.full(pos.size, 0.5),
        kept=lambda _t: np.ones(pos.size, bool), floor=0.0, num_layers=2,
        tokens=[" " + words[i % len(words)] for i in range(n_tokens)],
    )  # fmt: skip


@pytest.mark.parametrize("width", [360, 700, 1400])
def test_the_flow_graphs_token_labels_do_not_overlap(qtbot, width):
    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    view = FlowView(widget.addPlot())
    widget.resize(width, 300)
    widget.show()
    qtbot.waitExposed(widget)
    view.show(_graph(40), 0.0)
    qtbot.wait(30)
    view.plot.getViewBox().autoRange()
    qtbot.wait(30)
    axis = view.plot.getAxis("bottom")
    ticks = axis._tickLevels[0]
    assert len(ticks) >= 2
    metrics = QFontMetricsF(axis.style.get("tickFont") or axis.font())
    vb = view.plot.getViewBox()
    spans = []
    for x, text in sorted(ticks):
        centre = vb.mapViewToScene(QPointF(x, 0)).x()
        half = metrics.horizontalAdvance(text) / 2
        spans.append((centre - half, centre + half))
    for (_, right), (left, _) in zip(spans, spans[1:], strict=False):
        assert left > right, spans
