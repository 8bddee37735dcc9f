"""A patching sweep drawn: two heatmaps of the metric (residual: layer × position, with the
tokens on the position axis; heads: layer × head) on one colour scale, a hover line naming the
cell and the share of the clean − corrupted gap it restores, a click that asks for that cell's
patch, and PNG/SVG/CSV export through the panes' own machinery.

It draws a :class:`~llm_lens.desktop.state.sweep.SweepMap` as it is: every number is a cell of
core's ``SweepResult``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from llm_lens.core.exports.table import write_csv
from llm_lens.core.fileio import atomic_write
from llm_lens.desktop.state.sweep import SweepMap
from llm_lens.desktop.widgets.axes import plain_axis, steady_axes
from llm_lens.desktop.widgets.export import write_svg
from llm_lens.desktop.widgets.token_text import visible_text

KINDS = ("residual", "heads")
TEACHING = (
    "Each cell re-runs the corrupted prompt with one piece of the clean run put back. Red cells "
    "carry what makes the clean answer (1 = all of the clean run's metric back), white ones "
    "change nothing (0 = the corrupted run's), blue ones push further away. Click a cell to add "
    "that patch to the What-if list."
)
COLOURS = "CET-D1"  # diverging about 0 (the corrupted run): blue away, red towards the clean run
MAX_TICKS = 40  # token labels on the position axis before they thin out


class CellImage(pg.ImageItem):
    """A map's image. Signals: sig_clicked(float, float): the image row and column clicked."""

    sig_clicked = Signal(float, float)

    def __init__(self) -> None:
        super().__init__(axisOrder="row-major", nanPolicy="omit")

    def mouseClickEvent(self, ev: Any) -> None:  # noqa: N802 (Qt override)
        pos = ev.pos()
        self.sig_clicked.emit(pos.y(), pos.x())


class SweepMaps(QWidget):
    """The two maps of a sweep, their colour scale, hover line and export.

    Signals:
        sig_cell_clicked(str, int, int): "residual" or "heads", the layer, the position/head.
    """

    title = "Patching sweep"
    sig_cell_clicked = Signal(str, int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sweep: SweepMap | None = None
        self.graphics = pg.GraphicsLayoutWidget()
        self.plots: dict[str, Any] = {}
        self.images: dict[str, CellImage] = {}
        self.caption = self.graphics.addLabel("", row=0, col=0, colspan=2)  # in the PNG too
        for col, (kind, bottom) in enumerate(zip(KINDS, ("position (token)", "head"), strict=True)):
            self._add_map(kind, bottom, col)
        self.bar = pg.ColorBarItem(
            values=(0, 1), colorMap=COLOURS, interactive=False, width=12, label="share restored"
        )
        self.bar.setImageItem(list(self.images.values()), insert_in=self.plots["heads"])
        layout = self.graphics.ci.layout
        layout.setColumnStretchFactor(0, 3)
        layout.setColumnStretchFactor(1, 2)
        steady_axes(*self.plots.values())
        self.readout = QLabel("", wordWrap=True)
        self.graphics.scene().sigMouseMoved.connect(self._on_moved)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.graphics, 1)
        box.addWidget(self.readout)

    def _add_map(self, kind: str, bottom: str, col: int) -> None:
        plot = self.graphics.addPlot(row=1, col=col)
        plot.setTitle("residual stream patched" if kind == "residual" else "head output patched")
        plot.setLabel("left", "layer")
        plot.setLabel("bottom", bottom)
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(False, False)
        plot.hideButtons()
        for side in ("left", "bottom"):
            plain_axis(plot.getAxis(side))
        image = CellImage()
        image.sig_clicked.connect(lambda row, c, k=kind: self._clicked(k, row, c))
        plot.addItem(image)
        self.plots[kind], self.images[kind] = plot, image

    # ----------------------------------------------------------------- drawing
    def show_sweep(self, sweep: SweepMap) -> None:
        """Draw ``sweep``: each map's cells as the share of the gap they restore."""
        self.sweep = sweep
        for kind in KINDS:
            grid = self.grid(kind)
            shares = np.vectorize(sweep.restored, otypes=[float])(grid) if grid.size else grid
            self.images[kind].setImage(shares, autoLevels=False)
            layers, cols = grid.shape
            self.plots[kind].setRange(xRange=(0, cols), yRange=(0, layers), padding=0)
            self._ticks(kind, layers, cols)
        self.bar.setLevels(self._levels())
        res = sweep.result
        self.caption.setText(
            f"clean {sweep.ask.clean!r} → corrupted {sweep.ask.corrupt!r} · metric "
            f"{sweep.metric_text}: clean {res.clean:.3f}, corrupted {res.corrupt:.3f}"
        )
        self.readout.setText(
            f"{sweep.metric_text}: clean {res.clean:.3f}, corrupted {res.corrupt:.3f} "
            f"(gap {res.clean - res.corrupt:+.3f}); {sweep.seconds:.1f} s. Hover a cell."
        )

    def _levels(self) -> tuple[float, float]:
        """The colour scale: −1…1, widened to the cells beyond, symmetric about 0 so that white
        is "changes nothing" (the corrupted run's metric) and full red the clean run's."""
        values = [abs(v) for k in KINDS for v in self.images[k].image.ravel() if not math.isnan(v)]
        reach = float(max([1.0, *values]))
        return -reach, reach

    def _ticks(self, kind: str, layers: int, cols: int) -> None:
        plot = self.plots[kind]
        every = max(1, -(-layers // 12))
        plot.getAxis("left").setTicks([[(r + 0.5, str(r)) for r in range(0, layers, every)]])
        if kind == "heads":
            step = max(1, -(-cols // 16))
            plot.getAxis("bottom").setTicks([[(c + 0.5, str(c)) for c in range(0, cols, step)]])
            return
        step = max(1, -(-cols // MAX_TICKS))
        labels = [(p + 0.5, self.position_label(p)) for p in range(0, cols, step)]
        plot.getAxis("bottom").setTicks([labels])

    def clear(self) -> None:
        self.sweep = None
        for kind in KINDS:
            self.images[kind].clear()
            self.plots[kind].getAxis("bottom").setTicks([[]])
        self.caption.setText("")
        self.readout.setText("")

    # ----------------------------------------------------------------- reading
    def grid(self, kind: str) -> np.ndarray:
        """The metric drawn in map ``kind`` (layers × positions or layers × heads)."""
        if self.sweep is None:
            return np.zeros((0, 0))
        return np.asarray(getattr(self.sweep.result, kind), dtype=np.float64)

    def position_label(self, position: int) -> str:
        """The clean prompt's token at ``position`` ("clean→corrupted" where they differ)."""
        assert self.sweep is not None
        clean, corrupt = self.sweep.clean_tokens, self.sweep.corrupt_tokens
        a = visible_text(clean[position])
        if position < len(corrupt) and corrupt[position] != clean[position]:
            return f"{a}→{visible_text(corrupt[position])}"
        return a

    def cell_text(self, kind: str, layer: int, index: int) -> str:
        """One line naming cell (``layer``, ``index``) of map ``kind``, its metric and the share
        of the clean − corrupted gap it restores ('' outside the map)."""
        grid = self.grid(kind)
        if self.sweep is None or not (0 <= layer < grid.shape[0] and 0 <= index < grid.shape[1]):
            return ""
        value = float(grid[layer, index])
        if kind == "residual":
            place = f"residual entering layer {layer} at position {index} "
            place += f"({self.position_label(index)!r})"
        else:
            place = f"head {layer}.{index}'s output (every position)"
        if math.isnan(value):
            return f"{place}: layer {layer} has no attention heads"
        share = self.sweep.restored(value)
        restored = "the runs agree" if math.isnan(share) else f"restores {share:.0%} of the gap"
        return f"{place} patched: {self.sweep.metric_text} = {value:.3f}, {restored}"

    def cell_at(self, kind: str, x: float, y: float) -> tuple[int, int] | None:
        """(layer, index) of the cell at view point (``x``, ``y``) of map ``kind``."""
        grid = self.grid(kind)
        layer, index = math.floor(y), math.floor(x)
        if 0 <= layer < grid.shape[0] and 0 <= index < grid.shape[1]:
            return layer, index
        return None

    def _on_moved(self, pos: QPointF) -> None:
        for kind, plot in self.plots.items():
            box = plot.getViewBox()
            if box.sceneBoundingRect().contains(pos):
                point = box.mapSceneToView(pos)
                cell = self.cell_at(kind, point.x(), point.y())
                if cell is not None:
                    self.readout.setText(self.cell_text(kind, *cell))
                return

    def _clicked(self, kind: str, row: float, col: float) -> None:
        cell = self.cell_at(kind, col, row)
        if cell is not None and not math.isnan(self.grid(kind)[cell]):
            self.sig_cell_clicked.emit(kind, *cell)

    # ----------------------------------------------------------------- export
    def csv_table(self) -> tuple[list[str], list[list[Any]]]:
        """One row per cell: map, layer, position or head, token, metric, share restored."""
        header = ["map", "layer", "index", "token", "metric", "restored"]
        rows: list[list[Any]] = []
        if self.sweep is None:
            return header, rows
        for kind in KINDS:
            grid = self.grid(kind)
            for (layer, index), value in np.ndenumerate(grid):
                token = self.sweep.clean_tokens[index] if kind == "residual" else ""
                share = self.sweep.restored(float(value))
                rows.append([kind, layer, index, token, _cell(value), _cell(share)])
        return header, rows

    def export(self, path: str | Path) -> None:
        """PNG (both maps, pyqtgraph's exporter), SVG (the whole view) or CSV, by suffix."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".csv":
            write_csv(path, *self.csv_table())
        elif suffix == ".svg":
            atomic_write(path, lambda tmp: write_svg(self, self.title, tmp))
        else:
            import pyqtgraph.exporters as pge

            scene = self.graphics.scene()
            atomic_write(path, lambda tmp: pge.ImageExporter(scene).export(tmp))


def _cell(value: float) -> float | str:
    return "" if math.isnan(value) else float(value)
