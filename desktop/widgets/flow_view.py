"""The information-flow graph drawn over layers × tokens, with clickable edges.

Nodes sit at (token position, layer): a residual state entering layer l at height l, the state
after its attention at l + 0.5. Edges are coloured by kind (attention, MLP, residual) and as
thick as their importance. A click picks the nearest edge; the pane decides what it selects.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QFontMetricsF

from llm_lens.desktop.widgets.pane import plain_axis
from llm_lens.desktop.widgets.token_text import spaced_ticks, visible_text

KIND_COLOURS = {0: (66, 133, 244), 1: (150, 150, 150), 2: (244, 160, 0)}  # attn, residual, mlp


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
        plot.setLabel("bottom", "token")
        plot.setMenuEnabled(False)
        for side in ("left", "bottom"):
            plain_axis(plot.getAxis(side))
        self.item = pg.GraphItem()
        self.picked = pg.PlotDataItem(pen=pg.mkPen("r", width=3))
        plot.addItem(self.item)
        plot.addItem(self.picked)
        self.graph: Any = None
        self.edges = np.zeros(0, np.int64)  # indices of the edges drawn
        self._xy = np.zeros((0, 2, 2))  # (drawn edges, ends, xy)
        plot.scene().sigMouseClicked.connect(self._on_click)
        plot.getViewBox().sigResized.connect(self._on_resized)

    def _on_resized(self, *_: object) -> None:
        if self.graph is not None:
            self._ticks(self.graph)

    def show(self, graph: Any, threshold: float) -> int:
        """Draw the routes kept at ``threshold``; returns how many edges are drawn."""
        self.graph = graph
        self.edges = np.flatnonzero(graph.kept(threshold))
        e = self.edges
        src = np.stack([graph.src_pos[e], graph.src_level[e] / 2], axis=1)
        dst = np.stack([graph.dst_pos[e], graph.dst_level[e] / 2], axis=1)
        self._xy = np.stack([src, dst], axis=1).astype(float)  # (E, 2, 2)
        pos = self._xy.reshape(-1, 2) if len(e) else np.zeros((1, 2))
        adj = np.arange(2 * len(e)).reshape(-1, 2)
        pens = np.empty(len(e), dtype=[(c, np.uint8) for c in ("red", "green", "blue", "alpha")]
                        + [("width", float)])  # fmt: skip
        for i, edge in enumerate(e):
            r, g, b = KIND_COLOURS[int(graph.kind[edge])]
            w = float(graph.weight[edge])
            pens[i] = (r, g, b, int(130 + 125 * w), 1.0 + 5 * w)  # faint edges still seen
        self.item.setData(pos=pos, adj=adj if len(e) else None, pen=pens, size=4, symbol="o",
                          symbolBrush=pg.mkBrush(200, 200, 200, 160), symbolPen=None)  # fmt: skip
        self.picked.setData([], [])
        self._ticks(graph)
        return len(e)

    def _ticks(self, graph: Any) -> None:
        """Token labels under the graph, as many as the axis' width holds apart."""
        used = sorted(set(self._xy[:, :, 0].astype(int).ravel().tolist())) or [0]
        texts = [visible_text(graph.tokens[p], 8) for p in used]
        axis = self.plot.getAxis("bottom")
        metrics = QFontMetricsF(axis.style.get("tickFont") or axis.font())
        widths = [metrics.horizontalAdvance(t) for t in texts]
        span = max(used) - min(used) + 1.5  # the view's range: the positions and a margin
        px_per_unit = max(self.plot.getViewBox().width(), 100.0) / span
        ticks = [(used[i], texts[i]) for i in spaced_ticks(used, widths, px_per_unit)]
        axis.setTicks([ticks])
        layers = [(i, str(i)) for i in range(0, graph.num_layers + 1, 5)]
        self.plot.getAxis("left").setTicks([layers])

    def mark(self, drawn: int) -> None:
        """Draw the picked edge in red."""
        xy = self._xy[drawn]
        self.picked.setData(xy[:, 0], xy[:, 1])

    def clear(self) -> None:
        self.graph, self.edges, self._xy = None, np.zeros(0, np.int64), np.zeros((0, 2, 2))
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
