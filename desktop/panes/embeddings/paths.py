"""The Embeddings pane's layer paths: each prompt token's residual stream from the embedding
through every layer, drawn as one segment item per layer coloured by depth."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg

from llm_lens.desktop.panes.embeddings.labels import Labels, typical_range
from llm_lens.desktop.widgets.token_text import visible_text

if TYPE_CHECKING:
    from llm_lens.desktop.panes.embeddings.pane import EmbeddingsPane


def build_paths_plot(pane: EmbeddingsPane) -> None:
    """The layer paths' plot: a segment item per layer coloured by depth, start and end dots,
    the tokens' labels and the depth colour bar."""
    pane.paths_widget = pg.PlotWidget()
    pane.stack.addWidget(pane.paths_widget)
    plot = pane.paths_plot = pane.paths_widget.getPlotItem()
    plot.setLabel("bottom", "PC1")
    plot.setLabel("left", "PC2")
    plot.setMenuEnabled(False)
    pane.cmap = pg.colormap.get("plasma")
    pane.segments = []  # PlotDataItems, one per layer (its input -> its output)
    pane.start_dots = pg.ScatterPlotItem(size=7, symbol="o", pen=None, brush="c")
    pane.end_dots = pg.ScatterPlotItem(size=9, symbol="t", pen=pg.mkPen("w"), brush="y")
    plot.addItem(pane.start_dots)
    plot.addItem(pane.end_dots)
    pane.path_labels = Labels(plot)
    pane.depth_bar = pg.ColorBarItem(
        values=(0, 1), colorMap=pane.cmap, interactive=False, width=10, label="layer"
    )
    pane.depth_bar.setImageItem([], insert_in=plot)


def draw_paths(pane: EmbeddingsPane, coords: np.ndarray, tokens: Sequence[Any]) -> None:
    """One PlotDataItem per layer transition (all tokens, connect='pairs'), depth colours."""
    steps = coords.shape[1] - 1
    ensure_segments(pane, steps)
    for layer, item in enumerate(pane.segments):
        pairs = coords[:, layer : layer + 2].reshape(-1, 2)  # (tokens * 2, 2)
        item.setData(pairs[:, 0], pairs[:, 1])
    pane.start_dots.setData(pos=coords[:, 0])
    pane.end_dots.setData(pos=coords[:, -1])
    pane.path_labels.set([(coords[i, -1], visible_text(t.text, 12)) for i, t in enumerate(tokens)])


def fit_paths_view(pane: EmbeddingsPane, coords: np.ndarray) -> list[int]:
    """Range over the typical paths; returns the far-off tokens left out (attention sinks)."""
    (x0, y0), (x1, y1), far = typical_range(coords)
    pane.paths_plot.setRange(xRange=(x0, x1), yRange=(y0, y1), padding=0.05)
    return far


def ensure_segments(pane: EmbeddingsPane, layers: int) -> None:
    """Per-layer segment items, rebuilt only when a model with another depth arrives."""
    if len(pane.segments) == layers:
        return
    for item in pane.segments:
        pane.paths_plot.removeItem(item)
    pane.segments = []
    for layer in range(layers):
        colour = pane.cmap.map((layer + 0.5) / layers, mode="qcolor")
        item = pg.PlotDataItem(connect="pairs", pen=pg.mkPen(colour, width=1.5))
        pane.paths_plot.addItem(item)
        pane.segments.append(item)
    pane.depth_bar.setLevels((0, layers))
