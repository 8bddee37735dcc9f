"""A pane's figure as a file: PNG through pyqtgraph's exporter, SVG through Qt's own
``QSvgGenerator``; written atomically, so a failed export never leaves half a file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QWidget

from llm_lens.core.fileio import atomic_write

if TYPE_CHECKING:
    from llm_lens.desktop.widgets.pane import Pane


def export_image(pane: Pane, path: str | Path) -> None:
    """PNG or SVG by suffix. PNG: the pane's first plot via pyqtgraph's exporter, else the
    widget.

    SVG renders the whole pane through ``QSvgGenerator``: pyqtgraph 0.14's SVG exporter
    cannot parse the paths Qt 6.11 writes (pyqtgraph#3485).
    """
    path = Path(path)
    if path.suffix.lower() == ".svg":
        atomic_write(path, lambda tmp: write_svg(pane.svg_widget(), pane.title, tmp))
        return
    import pyqtgraph.exporters as pge

    items = pane.plot_items()
    if items:
        atomic_write(path, lambda tmp: pge.ImageExporter(items[0]).export(tmp))
    else:
        atomic_write(path, lambda tmp: pane.grab().save(tmp, "PNG"))


def write_svg(widget: QWidget, title: str, tmp: str) -> None:
    """Paint ``widget`` into the SVG file ``tmp``, titled after its pane."""
    from PySide6.QtCore import QPoint, QRect, QSize
    from PySide6.QtGui import QPainter
    from PySide6.QtSvg import QSvgGenerator

    size = widget.size() if widget.width() > 10 else QSize(800, 500)
    generator = QSvgGenerator()
    generator.setFileName(tmp)
    generator.setSize(size)
    generator.setViewBox(QRect(0, 0, size.width(), size.height()))
    generator.setTitle(f"LLM Lens – {title}")
    painter = QPainter(generator)
    try:
        QWidget.render(widget, painter, QPoint())  # Pane.render(step) shadows it
    finally:
        painter.end()
