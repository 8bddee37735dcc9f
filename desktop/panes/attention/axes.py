"""The Attention map's axes and colour scale: token labels on both axes that never run
together (each label as wide as its own text on the key axis, so a 38-token prompt is not read
off three labels), and the colour levels, stretched on a long prompt whose weights are small.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PySide6.QtGui import QFont, QFontMetricsF

from llm_lens.desktop.widgets.token_text import label_step, spaced_ticks

LONG_PROMPT = 512  # tokens: past this each query spreads over hundreds of keys, its weights are
# a few thousandths and a 0..1 colour scale shows the map almost all black: contrast starts on


def token_ticks(plot: Any, labels: Sequence[str]) -> None:
    """Token labels on the map's two axes for the cells on screen: the query axis every k-th
    (rows are one text line apart), the key axis each label where its own width clears the
    last one (:func:`spaced_ticks`)."""
    if not labels:
        return
    vb = plot.getViewBox()
    axis = plot.getAxis("bottom")
    metrics = QFontMetricsF(axis.style["tickFont"] or QFont())
    x0, x1 = vb.viewRange()[0]
    cells = max(x1 - x0, 1.0)  # cells on screen (zoomed in: fewer)
    every_y = label_step(cells, vb.height(), metrics.height() + 2)
    plot.getAxis("left").setTicks([[(i + 0.5, labels[i]) for i in range(0, len(labels), every_y)]])
    px_per_cell = max(vb.width(), 1.0) / cells
    inside = [  # cells whose whole label lies on the axis (pyqtgraph drops one that sticks out)
        i
        for i in range(max(0, int(x0)), min(len(labels), int(np.ceil(x1))))
        if abs((i + 0.5 - (x0 + x1) / 2) * px_per_cell) + metrics.horizontalAdvance(labels[i]) / 2
        <= vb.width() / 2
    ]
    widths = [metrics.horizontalAdvance(labels[i]) for i in inside]
    kept = spaced_ticks([i + 0.5 - x0 for i in inside], widths, px_per_cell)
    axis.setTicks([[(inside[k] + 0.5, labels[inside[k]]) for k in kept]])


def contrast_levels(matrix: np.ndarray) -> tuple[float, float]:
    """0 to the 98th percentile of the causal cells beyond key 0 (the sink most heads keep)."""
    if matrix.size == 0:
        return (0.0, 1.0)
    causal = matrix[np.tril_indices_from(matrix, -1)]
    causal = causal[~np.isnan(causal)]  # rows not brought back (NDIF) are unread
    if causal.size == 0:
        return (0.0, 1.0)
    return (0.0, float(max(np.percentile(causal, 98), 1e-3)))


def frame_view(plot: Any, content: int) -> None:
    """Frame ``content`` cells, nothing more: the image keeps a padded, stable shape (a whole
    run's size), and auto-range or zooming out would show its empty padding."""
    vb = plot.getViewBox()
    vb.setLimits(xMin=0, xMax=content, yMin=0, yMax=content)
    vb.setRange(xRange=(0, content), yRange=(0, content), padding=0)
    vb.disableAutoRange()
