"""The Attention pane's overview tiles and map cells: where a position lands in a thumbnail,
the marks of the selected token on the map and inside every tile, and the hover line of a cell
or a tile."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal

from llm_lens.desktop.widgets.marks import MARK_PEN, rect_xy

TILE = 32  # pixels per side of one overview thumbnail
GRID_MARK_PEN = pg.mkPen(255, 64, 129, 140, width=1)


class TileImage(pg.ImageItem):
    """The overview image. A signal, not a stored callback: an item holding a bound method of
    its pane makes a reference cycle whose garbage collection crashes PySide6.

    Signals:
        sig_clicked(float, float): image row and column (pixels) of a click.
    """

    sig_clicked = Signal(float, float)

    def __init__(self) -> None:
        super().__init__(axisOrder="row-major")

    def mouseClickEvent(self, ev: Any) -> None:  # noqa: N802 (Qt override)
        pos = ev.pos()
        self.sig_clicked.emit(float(pos.y()), float(pos.x()))
        ev.accept()


def strip(row: np.ndarray, bins: int) -> np.ndarray:
    """A 1-D attention row resampled to ``bins`` cells: max-pooled, or repeated if short."""
    n = row.shape[-1]
    if n >= bins:
        edges = (np.arange(bins) * n) // bins
        return np.maximum.reduceat(row, edges, axis=-1)
    return row[..., (np.arange(bins) * n) // bins]


def strip_bin(n: int, bins: int, position: int) -> int:
    """Which of ``bins`` cells of a length-``n`` row resampled by :func:`strip` shows
    ``position``."""
    edges = (np.arange(bins) * n) // bins
    hits = np.flatnonzero(edges <= position)
    return int(hits[-1]) if hits.size else 0


def overview_cell(n_prompt: int, position: int) -> int:
    """The cell of a prefill overview thumbnail (prompt map pooled to ≤ TILE) at ``position``."""
    s = min(TILE, n_prompt)
    block = max(1, -(-n_prompt // max(s, 1)))
    return position // block


def grid_mark_lines(
    shape: tuple[int, int], cell: int, row: bool
) -> tuple[list[float], list[float]]:
    """Line pairs marking thumbnail column ``cell`` (and row ``cell`` when ``row``) inside
    every layer × head tile of a grid of ``shape``."""
    xs: list[float] = []
    ys: list[float] = []
    for ly in range(shape[0]):
        for hd in range(shape[1]):
            x0, y0 = hd * TILE, ly * TILE
            xs += [x0 + cell + 0.5, x0 + cell + 0.5]
            ys += [y0, y0 + TILE]
            if row:
                xs += [x0, x0 + TILE]
                ys += [y0 + cell + 0.5, y0 + cell + 0.5]
    return xs, ys


def tile_text(shape: tuple[int, int], image: np.ndarray | None, x: float, y: float) -> str:
    """'layer 3, head 5: largest thumbnail weight 0.91 · click to show it'."""
    layer, head = int(y // TILE), int(x // TILE)
    if not (0 <= layer < shape[0] and 0 <= head < shape[1]):
        return ""
    peak = ""
    if image is not None:
        tile = np.asarray(image)[layer * TILE : (layer + 1) * TILE, head * TILE : (head + 1) * TILE]
        peak = (
            f": largest weight in the thumbnail {float(np.nanmax(tile)):.3f}" if tile.size else ""
        )
    return f"layer {layer}, head {head}{peak} · click to show this head"


def cell_text(
    matrix: np.ndarray, positions: np.ndarray, texts: list[str], block: int, x: float, y: float
) -> str:
    """'query 12 'bank' → key 3 'the': weight 0.412' (the pane adds layer and head)."""
    qc, kc = int(math.floor(y)), int(math.floor(x))
    n = matrix.shape[0]
    if not (0 <= qc < n and 0 <= kc < n):
        return ""
    value = float(matrix[qc, kc])
    weight = "not read (future token)" if kc > qc or math.isnan(value) else f"weight {value:.4f}"
    pooled = f" (max over blocks of {block})" if block > 1 else ""
    return (
        f"query {int(positions[qc])} {texts[qc]!r} → key {int(positions[kc])} "
        f"{texts[kc]!r}: {weight}{pooled}"
    )


def tile_cell(step: Any, n_prompt: int, position: int) -> tuple[int, bool]:
    """Where ``position`` shows in the overview tiles of ``step``, and whether as a row too:
    the pooled prompt map at the prefill, the resampled recorded row later (-1: nowhere)."""
    if step is None or position < 0:
        return -1, False
    if step.index == 0:
        return (overview_cell(n_prompt, position), True) if position < n_prompt else (-1, False)
    n = int(np.asarray(step.attention).shape[-1])
    return (strip_bin(n, TILE, position), False) if position < n else (-1, False)


class SelectionMarks:
    """The selected token on the map (boxes round its query row and key column) and in every
    layer × head tile (lines through its cell)."""

    def __init__(self, map_plot: Any, grid_plot: Any) -> None:
        self.row_box = pg.PlotDataItem(pen=MARK_PEN)
        self.col_box = pg.PlotDataItem(pen=MARK_PEN)
        self.grid_marks = pg.PlotDataItem(connect="pairs", pen=GRID_MARK_PEN)
        for item in (self.row_box, self.col_box):
            map_plot.addItem(item, ignoreBounds=True)
        grid_plot.addItem(self.grid_marks, ignoreBounds=True)

    def show(self, matrix: np.ndarray, block: int, position: int) -> dict[str, Any]:
        """Box the map cell of ``position``; returns the weights it marks."""
        n = matrix.shape[0]
        cell = position // max(block, 1) if position >= 0 else -1
        if not 0 <= cell < n:
            self.row_box.setData([], [])
            self.col_box.setData([], [])
            return {}
        self.row_box.setData(*rect_xy(0, cell, cell + 1, cell + 1))
        self.col_box.setData(*rect_xy(cell, cell, cell + 1, n))
        return {
            "cell": cell,
            "row_weights": matrix[cell, : cell + 1].copy(),
            "column_weights": matrix[cell:, cell].copy(),
        }

    def show_tiles(self, shape: tuple[int, int], cell: int, row: bool) -> dict[str, Any]:
        """Lines through ``cell`` in every tile (none when there is no model or no cell)."""
        if cell < 0 or shape[0] == 0:
            self.grid_marks.setData([], [])
            return {}
        self.grid_marks.setData(*grid_mark_lines(shape, cell, row))
        return {"grid_cell": cell, "grid_row": row}


def map_position_at(plot: Any, positions: np.ndarray, scene_pos: Any) -> int | None:
    """The token position a click on the map ``plot`` selects: a cell selects its key, the
    left axis a query, the bottom axis a key (None: not on the map or its axes)."""
    vb = plot.vb
    p = vb.mapSceneToView(scene_pos)
    if vb.sceneBoundingRect().contains(scene_pos):
        cell = int(np.floor(p.x()))
    elif plot.getAxis("left").sceneBoundingRect().contains(scene_pos):
        cell = int(np.floor(p.y()))
    elif plot.getAxis("bottom").sceneBoundingRect().contains(scene_pos):
        cell = int(np.floor(p.x()))
    else:
        return None
    return int(positions[cell]) if 0 <= cell < len(positions) else None
