"""Hover readouts: the numbers under the mouse on every heatmap, bar and point.

Each pane names its plots and the pure function that reads one of them
(:meth:`Pane.hover_targets`: view coordinates in, one line out, '' outside the data), so tests
call those directly; :func:`install_hover` shows the line in the pane's readout label
(:meth:`Pane.readout_label`) while the mouse moves over the plots.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QLabel

from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.pane import HoverTarget, Pane


def _watch(target: HoverTarget, label: QLabel) -> None:
    """Call ``target.text_of(x, y)`` with view coordinates as the mouse moves over its plot."""
    plot = target.plot

    def moved(scene_pos: QPointF) -> None:
        vb = plot.getViewBox()
        if vb.scene() is None or not vb.sceneBoundingRect().contains(scene_pos):
            return
        p = vb.mapSceneToView(scene_pos)
        text = target.text_of(p.x(), p.y())
        if text:
            label.setText(text)

    (target.scene or plot.scene()).sigMouseMoved.connect(moved)


def install_hover(panes: Mapping[str, Pane], controller: Controller) -> None:
    """Add a readout line under each plotting pane and feed it from its plots."""
    for pane in panes.values():
        targets = pane.hover_targets()
        if not targets:
            continue
        label = pane.readout_label()
        for target in targets:
            _watch(target, label)
