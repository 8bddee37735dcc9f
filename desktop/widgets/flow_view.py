"""The information-flow graph drawn over layers × tokens, with clickable edges.

Only the tokens on a kept route get a column, one column each and side by side (a route through
positions 3, 40 and 41 of a long context is not three stacks squeezed into two corners), so a
wider pane spreads the columns and labels them all. A state sits at (column, layer): entering
layer l at height l, after its attention at l + 0.5. Edges are coloured by kind: attention in
bright blue across columns, the MLP in orange beside the residual stream's thin grey line, each
as thick as its importance; dots mark only where attention reads or writes. A click picks the
nearest edge; the pane decides what it selects.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QFontMetricsF

from llm_lens.desktop.widgets.pane import plain_axis
from llm_lens.desktop.widgets.token_text import spaced_ticks, visible_text

KIND_COLOURS = {0: (79, 195, 247), 1: (120, 120, 120), 2: (255, 183, 77)}  # attn, residual, mlp
MLP_OFFSET = 0.12  # columns: an MLP edge is drawn this far right of the residual line it shares
NODE_SIZE = 6  # pixels: a dot where attention reads or writes a state (none elsewhere)


def columns(graph: Any, edges: np.ndarray) -> list[int]:
    """The token positions the drawn ``edges`` touch, in order: one column each."""
    ends = np.concatenate([graph.src_pos[edges], graph.dst_pos[edges]])
    return sorted(set(ends.astype(int).tolist())) or [len(graph.tokens) - 1]


def edge_pens(graph: Any, edges: np.ndarray) -> np.ndarray:
    """One pen per edge: its kind's colour, as opaque and thick as its weight; the residual
    stream thinner and dimmer so the attention and MLP edges stand out over it."""
    fields = [(c, np.uint8) for c in ("red", "green", "blue", "alpha")] + [("width", float)]
    pens = np.empty(len(edges), dtype=fields)
    for i, edge in enumerate(edges):
        kind, w = int(graph.kind[edge]), float(graph.weight[edge])
        r, g, b = KIND_COLOURS[kind]
        if kind == 1:
            pens[i] = (r, g, b, int(120 + 80 * w), 1.0 + 2 * w)
        else:
            pens[i] = (r, g, b, int(170 + 85 * w), 1.5 + 5 * w)
    return pens


class FlowView(QObject):
    """Owns the graph's plot items; ``show(graph, threshold)`` redraws the kept routes.

    Signals:
        sig_edge_clicked(int): index (into the graph's edge arrays) of the edge clicked.
    """

    sig_edge_clicked = Signal(int)

    def __init__(self, plot: Any) -> None:
        super().__init__()
        self.plot = plot
        plot.setLabel("left", "layer")
        plot.setLabel("bottom", "token (those on a route kept)")
        plot.setMenuEnabled(False)
        for side in ("left", "bottom"):
            plain_axis(plot.getAxis(side))
        self.item = pg.GraphItem()
        self.picked = pg.PlotDataItem(pen=pg.mkPen("r", width=3))
        plot.addItem(self.item)
        plot.addItem(self.picked)
        self.graph: Any = None
        self.edges = np.zeros(0, np.int64)  # indices of the edges drawn
        self.used: list[int] = []  # the token position of each column
        self._xy = np.zeros((0, 2, 2))  # (drawn edges, ends, xy)
        plot.scene().sigMouseClicked.connect(self._on_click)
        plot.getViewBox().sigResized.connect(self._on_resized)
        plot.getViewBox().sigXRangeChanged.connect(self._on_resized)  # zoomed: re-spaced

    def _on_resized(self, *_: object) -> None:
        if self.graph is not None:
            self._ticks(self.graph)

    def show(self, graph: Any, threshold: float) -> int:
        """Draw the routes kept at ``threshold``; returns how many edges are drawn."""
        self.graph = graph
        self.edges = e = np.flatnonzero(graph.kept(threshold))
        self.used = columns(graph, e)
        column = {p: c for c, p in enumerate(self.used)}
        shift = np.where(graph.kind[e] == 2, MLP_OFFSET, 0.0)
        src_x = np.array([column[int(p)] for p in graph.src_pos[e]], float) + shift
        dst_x = np.array([column[int(p)] for p in graph.dst_pos[e]], float) + shift
        src = np.stack([src_x, graph.src_level[e] / 2], axis=1)
        dst = np.stack([dst_x, graph.dst_level[e] / 2], axis=1)
        self._xy = np.stack([src, dst], axis=1).astype(float)  # (E, 2, 2)
        pos = self._xy.reshape(-1, 2) if len(e) else np.zeros((1, 2))
        adj = np.arange(2 * len(e)).reshape(-1, 2)
        dots = np.repeat(graph.kind[e] == 0, 2) if len(e) else np.zeros(1, bool)
        self.item.setData(pos=pos, adj=adj if len(e) else None, pen=edge_pens(graph, e),
                          size=np.where(dots, NODE_SIZE, 0), symbol="o", symbolPen=None,
                          symbolBrush=pg.mkBrush(230, 240, 255))  # fmt: skip
        self.picked.setData([], [])
        self.plot.setXRange(-0.6, len(self.used) - 0.4, padding=0)
        self.plot.setYRange(0, graph.num_layers, padding=0.02)
        self._ticks(graph)
        return len(e)

    def _ticks(self, graph: Any) -> None:
        """Each column's token under it, as many as the axis' width holds apart."""
        texts = [visible_text(graph.tokens[p], 8) for p in self.used]
        axis = self.plot.getAxis("bottom")
        metrics = QFontMetricsF(axis.style.get("tickFont") or axis.font())
        widths = [metrics.horizontalAdvance(t) for t in texts]
        vb = self.plot.getViewBox()
        x0, x1 = vb.viewRange()[0]
        px_per_unit = max(vb.width(), 100.0) / max(x1 - x0, 1e-6)
        centres = [c - x0 for c in range(len(self.used))]  # from the view's left edge
        ticks = [(c, texts[c]) for c in spaced_ticks(centres, widths, px_per_unit)]
        axis.setTicks([ticks])
        layers = [(i, str(i)) for i in range(0, graph.num_layers + 1, 5)]
        self.plot.getAxis("left").setTicks([layers])

    def mark(self, drawn: int) -> None:
        """Draw the picked edge in red."""
        xy = self._xy[drawn]
        self.picked.setData(xy[:, 0], xy[:, 1])

    def clear(self) -> None:
        self.graph, self.edges, self._xy = None, np.zeros(0, np.int64), np.zeros((0, 2, 2))
        self.used = []
        self.item.setData(pos=np.zeros((0, 2)))
        self.picked.setData([], [])

    def nearest(self, x: float, y: float, sx: float, sy: float) -> int:
        """Index (among the drawn edges) of the segment nearest (x, y) in units scaled by
        (sx, sy) per pixel, or -1 when none is within 8 pixels."""
        if not len(self._xy):
            return -1
        p = np.array([x / sx, y / sy])
        a, b = self._xy[:, 0] / [sx, sy], self._xy[:, 1] / [sx, sy]
        ab = b - a
        t = np.clip(((p - a) * ab).sum(1) / np.maximum((ab * ab).sum(1), 1e-12), 0, 1)
        d = np.linalg.norm(a + t[:, None] * ab - p, axis=1)
        best = int(d.argmin())
        return best if d[best] <= 8 else -1

    def _on_click(self, ev: Any) -> None:
        vb = self.plot.getViewBox()
        if not self.plot.sceneBoundingRect().contains(ev.scenePos()):
            return
        pt = vb.mapSceneToView(ev.scenePos())
        px = vb.viewPixelSize()  # view units per pixel (x, y)
        drawn = self.nearest(pt.x(), pt.y(), px[0], px[1])
        if drawn >= 0:
            self.mark(drawn)
            self.sig_edge_clicked.emit(int(self.edges[drawn]))
