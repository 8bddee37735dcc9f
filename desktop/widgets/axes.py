"""Axes that read the data and hold still: no SI prefix on counts, tick space that only grows.

Shared by every pane's plots (and re-exported by :mod:`llm_lens.desktop.widgets.pane`, where
the panes import them from).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QWidget


def steady_axes(*plots: Any) -> None:
    """Let the tick-label space of the plots' vertical axes grow but never shrink.

    pyqtgraph measures tick labels while painting and resizes the axis to fit them; labels that
    change every step (token texts, changing ranges) would re-lay out the plot and paint it
    twice per step. Growing only, the width settles after the first few steps.
    """
    for plot in plots:
        for name in ("left", "right"):
            plot.getAxis(name).setStyle(autoReduceTextSpace=False)


def plain_axis(axis: Any) -> None:
    """No SI prefix on ``axis`` (a pyqtgraph AxisItem), now or later: ticks read the data.

    pyqtgraph 0.14's ``enableAutoSIPrefix(False)`` still works out a scale from the range of
    that moment and keeps it (nothing updates it once the prefix is off), unsaid on the label:
    a Logits pane shown again over 0…0.57 read 100–500 under bars of 45 % from then on, and a
    head map first shown empty (0…1) read layer 0–30,000. The scale goes back to 1 here.
    """
    axis.enableAutoSIPrefix(False)
    if axis.autoSIPrefixScale != 1.0 or axis.labelUnitPrefix:
        axis.autoSIPrefixScale = 1.0
        axis.labelUnitPrefix = ""
        axis.label.setHtml(axis.labelString())
        axis.picture = None
        axis.update()


def plain_axes(root: QWidget) -> None:
    """No SI prefix on any axis of ``root``'s plots: token positions, layers and heads are
    counts, and an empty plot's −0.5…0.5 range read "(x0.001)" with ticks of −500…500."""
    import pyqtgraph as pg

    for view in root.findChildren(pg.GraphicsView):
        for item in view.scene().items():
            if isinstance(item, pg.AxisItem):
                plain_axis(item)
