"""The "Why this token?" flow graph's token labels never run together: as many as the axis'
width holds apart, at any width."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QFontMetricsF

from llm_lens.desktop.widgets.flow_view import MLP_OFFSET, FlowView
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


def _sparse_graph():
    """Routes through positions 3, 40 and 41 of a 42-token context: attention 3 → 41 and
    40 → 41 at layer 0, the residual and MLP of 41 above it."""
    tokens = tuple(f" t{i}" for i in range(42))
    kind = np.array([0, 0, 1, 2, 1])  # attention, attention, residual, MLP, residual
    return SimpleNamespace(
        src_pos=np.array([3, 40, 41, 41, 41]), dst_pos=np.array([41, 41, 41, 41, 41]),
        src_level=np.array([0, 0, 1, 1, 0]), dst_level=np.array([1, 1, 2, 2, 1]),
        kind=kind, weight=np.full(5, 0.5), kept=lambda _t: np.ones(5, bool), floor=0.0,
        num_layers=1, tokens=tokens,
    )  # fmt: skip


@pytest.mark.parametrize("width", [360, 1400])
def test_each_token_on_a_route_gets_a_column_of_its_own(qtbot, width):
    """Not three stacks squeezed at positions 3, 40 and 41 of a 0..41 axis: three columns side
    by side, each labelled with its token; the view frames them (so maximizing spreads them)."""
    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    view = FlowView(widget.addPlot())
    widget.resize(width, 300)
    widget.show()
    qtbot.waitExposed(widget)
    graph = _sparse_graph()
    assert view.show(graph, 0.0) == 5
    qtbot.wait(30)
    assert view.used == [3, 40, 41]
    xs = view._xy[:, :, 0]
    np.testing.assert_allclose(xs[:2, 0], [0, 1])  # the attention edges' sources
    assert set(np.round(xs[2:].ravel() % 1, 2)) <= {0.0, MLP_OFFSET}
    x0, x1 = view.plot.getViewBox().viewRange()[0]
    assert x0 < 0 < 2 < x1 < 3  # the columns, not the 42 positions
    ticks = view.plot.getAxis("bottom")._tickLevels[0]
    assert sorted(ticks) == [(0, "·t3"), (1, "·t40"), (2, "·t41")]


def test_edges_stand_out_on_black_and_dots_mark_attention_only(qtbot):
    from llm_lens.desktop.widgets.flow_view import NODE_SIZE, edge_pens

    graph = _sparse_graph()
    pens = edge_pens(graph, np.arange(5))
    attention, residual, mlp = pens[0], pens[2], pens[3]
    for pen in (attention, mlp):  # bright and nearly opaque even at half weight
        assert max(pen["red"], pen["green"], pen["blue"]) >= 240 and pen["alpha"] >= 200
    assert residual["width"] < attention["width"] and residual["alpha"] < attention["alpha"]
    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    view = FlowView(widget.addPlot())
    view.show(graph, 0.0)
    sizes = view.item.scatter.data["size"]
    np.testing.assert_array_equal(sizes, [NODE_SIZE] * 4 + [0] * 6)  # the attention ends
