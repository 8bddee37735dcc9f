"""Does the window fit? Every control inside its pane and the window, every plot big enough.

Used by ``llm-lens --selftest`` (which fails on any problem) and by the tests at 1280 × 720,
1366 × 768 and 1920 × 1080. Each pane is brought to the front of its tab group in turn, checked,
and the tabs that were in front are put back.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDockWidget,
    QLineEdit,
    QWidget,
)

MIN_PLOT = (100, 70)  # pixels of a plot's data area (its view box) below which it is unusable
CONTROLS = (QAbstractButton, QAbstractSpinBox, QComboBox, QAbstractSlider, QLineEdit)


def in_window(window: QWidget, widget: QWidget) -> QRect:
    """``widget``'s rectangle in ``window``'s coordinates."""
    return QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())


def shown_in(window: QWidget, widget: QWidget) -> bool:
    """Visible and on the window (a tab behind another is kept visible but moved off it)."""
    return widget.isVisible() and window.rect().intersects(in_window(window, widget))


def _name(widget: QWidget) -> str:
    text = widget.text() if hasattr(widget, "text") and callable(widget.text) else ""
    kind = type(widget).__name__
    return f"{kind} {text!r}" if isinstance(text, str) and text else kind


def control_problems(window: QWidget, area: QWidget, where: str) -> list[str]:
    """Controls of ``area`` outside it or the window, or squeezed below their minimum width."""
    problems = []
    bounds = in_window(window, area) & window.rect()
    for control in area.findChildren(QWidget):
        if not isinstance(control, CONTROLS) or not control.isVisible():
            continue
        if control.objectName().startswith("qt_"):  # scroll bars, spin-box internals
            continue
        rect = in_window(window, control)
        if not bounds.contains(rect):
            problems.append(f"{where}: {_name(control)} lies outside the visible area")
        elif control.width() + 2 < control.minimumSizeHint().width():
            problems.append(
                f"{where}: {_name(control)} is {control.width()} px wide, needs "
                f"{control.minimumSizeHint().width()}"
            )
    return problems


def plot_problems(area: QWidget, where: str) -> list[str]:
    """pyqtgraph plots of ``area`` whose data area is smaller than :data:`MIN_PLOT`, or whose
    legend does not fit inside it (the view clips it: a label cut off mid-word)."""
    import pyqtgraph as pg

    problems = []
    for view in area.findChildren(pg.GraphicsView):
        if not view.isVisible():
            continue
        for item in view.scene().items():
            if not isinstance(item, pg.PlotItem) or isinstance(item, pg.ColorBarItem):
                continue
            if not item.isVisible():
                continue
            box = item.getViewBox()
            w, h = round(box.width()), round(box.height())
            title = item.titleLabel.text if item.titleLabel.isVisible() else ""
            name = f" {title!r}" if title else ""
            if w < MIN_PLOT[0] or h < MIN_PLOT[1]:
                problems.append(f"{where}: plot{name} is {w}×{h} px (needs {MIN_PLOT[0]}×"
                                f"{MIN_PLOT[1]})")  # fmt: skip
            legend = item.legend
            if legend is not None and legend.isVisible() and legend.items:
                shown = legend.sceneBoundingRect()
                if not box.sceneBoundingRect().adjusted(-1, -1, 1, 1).contains(shown):
                    problems.append(f"{where}: the legend of plot{name} is cut off (it is "
                                    f"{shown.width():.0f}×{shown.height():.0f} px in a {w}×{h} "
                                    "px plot)")  # fmt: skip
    return problems


def fit_problems(window: Any, size: tuple[int, int] | None = None) -> list[str]:
    """Everything that does not fit the window now (empty: it fits).

    ``size``: the size asked for (``--window-size``); a window that could not shrink to it is a
    problem in itself, since a screen of that size would cut it off.
    """
    app = QApplication.instance()
    assert app is not None
    problems = []
    if size is not None and (window.width() > size[0] or window.height() > size[1]):
        problems.append(
            f"the window is {window.width()}×{window.height()} px, larger than the "
            f"{size[0]}×{size[1]} asked for (its minimum is {window.minimumSizeHint().width()}"
            f"×{window.minimumSizeHint().height()})"
        )
    hidden = window.hidden_panes()
    if hidden:
        problems.append(f"panes neither shown nor one tab away: {', '.join(hidden)}")
    problems += control_problems(window, window.centralWidget(), "prompt strip")
    docks: dict[str, QDockWidget] = window.docks
    front = [d for d in docks.values() if shown_in(window, d)]
    for name, dock in docks.items():
        if not dock.toggleViewAction().isChecked():
            continue
        dock.raise_()
        app.processEvents()
        problems += control_problems(window, dock, name)
        problems += plot_problems(dock, name)
    for dock in front:
        dock.raise_()
    app.processEvents()
    return problems
