"""One selected token, reflected in every pane, and the gestures that select it.

:func:`link_panes` adds to each pane the overlay items that mark the controller's selected
token (``controller.token``) and the clicks that change it. Each pane's marks are recomputed
after each of its renders and whenever the selection moves; what a mark shows is kept in
``pane.linked`` (a dict of the highlighted data) so tests read data, not pixels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QRectF, Qt
from PySide6.QtGui import QPainter, QPen
from PySide6.QtWidgets import QWidget

from llm_lens.desktop.state.selection import first_position_of

MARK_PEN = pg.mkPen("#ff4081", width=2)
TILE = 32  # the Attention pane's overview tile size


def rect_xy(x0: float, y0: float, x1: float, y1: float) -> tuple[list[float], list[float]]:
    return [x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0]


def strip_bin(n: int, bins: int, position: int) -> int:
    """Which of ``bins`` cells of a length-``n`` row resampled by ``panes.attention.strip``
    shows ``position``."""
    edges = (np.arange(bins) * n) // bins
    hits = np.flatnonzero(edges <= position)
    return int(hits[-1]) if hits.size else 0


def overview_cell(n_prompt: int, position: int) -> int:
    """The cell of a prefill overview thumbnail (prompt map pooled to ≤ TILE) at ``position``."""
    s = min(TILE, n_prompt)
    block = max(1, -(-n_prompt // max(s, 1)))
    return position // block


class _ChipMark(QWidget):
    """A transparent overlay over a ChipView drawing a ring round the selected token's chip."""

    def __init__(self, view: Any) -> None:
        super().__init__(view)
        self.view = view
        self.position = -1
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        view.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        if event.type() == QEvent.Type.Resize:
            self.setGeometry(self.view.rect())
        return False

    def paintEvent(self, _event: Any) -> None:  # noqa: N802 (Qt name)
        if not 0 <= self.position < len(self.view.rects):
            return
        painter = QPainter(self)
        painter.setPen(QPen(MARK_PEN.color(), 2, Qt.PenStyle.SolidLine))
        rect: QRectF = self.view.rects[self.position]
        painter.drawRoundedRect(rect.adjusted(-1.5, -1.5, 1.5, 1.5), 4, 4)
        painter.end()


class _ChipHover(QObject):
    """Hovering or clicking a model token chip selects that token everywhere."""

    def __init__(self, view: Any, controller: Any) -> None:
        super().__init__(view)
        self.view, self.controller = view, controller
        view.setMouseTracking(True)
        view.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        kind = event.type()
        if kind in (QEvent.Type.MouseMove, QEvent.Type.MouseButtonPress):
            index = self.view.chip_at(event.position())  # type: ignore[attr-defined]
            if index >= 0 and index != self.controller.token:
                press = kind == QEvent.Type.MouseButtonPress
                self.controller.request_select_token(index, with_step=press)
        return False


def link_tokens(pane: Any, controller: Any) -> Any:
    mark = _ChipMark(pane.model_view)
    mark.setGeometry(pane.model_view.rect())
    pane._chip_hover = _ChipHover(pane.model_view, controller)

    def reflect() -> None:
        pos = controller.token
        mark.position = pos if pos < len(pane.model_view.chips) else -1
        mark.update()
        pane.linked = {"chip": mark.position}

    return reflect


def link_attention(pane: Any, controller: Any) -> Any:
    row_box = pg.PlotDataItem(pen=MARK_PEN)
    col_box = pg.PlotDataItem(pen=MARK_PEN)
    grid_marks = pg.PlotDataItem(connect="pairs", pen=pg.mkPen(255, 64, 129, 140, width=1))
    for item in (row_box, col_box):
        pane.map_plot.addItem(item, ignoreBounds=True)
    pane.grid_plot.addItem(grid_marks, ignoreBounds=True)
    pane.map_plot.scene().sigMouseClicked.connect(
        lambda ev: _attention_clicked(pane, controller, ev.scenePos())
    )

    def reflect() -> None:
        pos, block = controller.token, max(pane.block, 1)
        n = pane.matrix.shape[0]
        cell = pos // block if pos >= 0 else -1
        linked: dict[str, Any] = {}
        if 0 <= cell < n:
            row_box.setData(*rect_xy(0, cell, cell + 1, cell + 1))
            col_box.setData(*rect_xy(cell, cell, cell + 1, n))
            linked.update(
                cell=cell,
                row_weights=pane.matrix[cell, : cell + 1].copy(),
                column_weights=pane.matrix[cell:, cell].copy(),
            )
        else:
            row_box.setData([], [])
            col_box.setData([], [])
        linked.update(_grid_marks(pane, controller, grid_marks, pos))
        pane.linked = linked

    return reflect


def map_cell_at(pane: Any, scene_pos: Any) -> int | None:
    """The token position a click on the map selects: a cell selects its key, the left axis
    a query, the bottom axis a key."""
    plot = pane.map_plot
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
    return int(pane.positions[cell]) if 0 <= cell < len(pane.positions) else None


def _attention_clicked(pane: Any, controller: Any, scene_pos: Any) -> None:
    position = map_cell_at(pane, scene_pos)
    if position is not None:
        controller.request_select_token(position)


def _grid_marks(pane: Any, controller: Any, item: Any, pos: int) -> dict[str, Any]:
    """Mark the selected token's row and column inside every layer × head tile."""
    step, prompt = controller.current_step(), controller.prompt
    layers, heads = pane._grid_shape
    if step is None or prompt is None or pos < 0 or layers == 0:
        item.setData([], [])
        return {}
    if step.index == 0:
        if pos >= len(prompt):
            item.setData([], [])
            return {}
        cell, row = overview_cell(len(prompt), pos), True
    else:
        n = int(np.asarray(step.attention).shape[-1])
        if pos >= n:
            item.setData([], [])
            return {}
        cell, row = strip_bin(n, TILE, pos), False
    xs: list[float] = []
    ys: list[float] = []
    for ly in range(layers):
        for hd in range(heads):
            x0, y0 = hd * TILE, ly * TILE
            xs += [x0 + cell + 0.5, x0 + cell + 0.5]
            ys += [y0, y0 + TILE]
            if row:
                xs += [x0, x0 + TILE]
                ys += [y0 + cell + 0.5, y0 + cell + 0.5]
    item.setData(xs, ys)
    return {"grid_cell": cell, "grid_row": row}


def link_layers(pane: Any, controller: Any) -> Any:
    box = pg.PlotDataItem(pen=MARK_PEN)
    pane.heat_plot.addItem(box, ignoreBounds=True)

    def clicked(ev: Any) -> None:
        vb = pane.heat_plot.vb
        if pane._prompt_lens is not None and vb.sceneBoundingRect().contains(ev.scenePos()):
            x = int(np.floor(vb.mapSceneToView(ev.scenePos()).x()))
            if 0 <= x < pane._prompt_lens.top1_ids.shape[1]:
                controller.request_select_token(x)

    pane.heat_plot.scene().sigMouseClicked.connect(clicked)

    def lens_cell(row: int, column: int) -> None:
        """A lens table cell names a vocabulary token: select where it occurs in the run."""
        lens = pane._lens
        if lens is not None and row < lens.top_ids.shape[0]:
            pos = first_position_of(controller, int(lens.top_ids[row, column]))
            if pos >= 0:
                controller.request_select_token(pos)

    pane.lens_table.cellClicked.connect(lens_cell)

    def reflect() -> None:
        lens, pos = pane._prompt_lens, controller.token
        if lens is None or not 0 <= pos < lens.top1_ids.shape[1]:
            box.setData([], [])
            pane.linked = {}
            return
        box.setData(*rect_xy(pos, 0, pos + 1, lens.top1_ids.shape[0]))
        pane.linked = {
            "lens_column": pos,
            "lens_top1": tuple(row[pos] for row in lens.top1_texts),
        }

    return reflect


def link_embeddings(pane: Any, controller: Any) -> Any:
    ring = pg.ScatterPlotItem(size=18, pen=pg.mkPen("#ff4081", width=3), brush=None)
    path = pg.PlotDataItem(pen=pg.mkPen("#ff4081", width=3), symbol="o", symbolSize=5)
    pane.vocab_plot.addItem(ring, ignoreBounds=True)
    pane.paths_plot.addItem(path, ignoreBounds=True)

    def clicked(ev: Any) -> None:
        point = pane._view_point(ev.scenePos())
        token = None if point is None else pane.nearest(point.x(), point.y())
        if token is not None:
            pos = first_position_of(controller, token)
            if pos >= 0:
                controller.request_select_token(pos)

    pane.vocab_plot.scene().sigMouseClicked.connect(clicked)

    def reflect() -> None:
        from llm_lens.desktop.state.selection import selected_token

        chosen, linked = selected_token(controller), {}
        if chosen is not None and pane.projection is not None:
            xy = np.asarray(pane.projection.coords[chosen[1].id], np.float64)
            ring.setData(pos=xy[None])
            linked["point"] = xy
        else:
            ring.setData([], [])
        if chosen is not None and pane.paths is not None and chosen[0] < len(pane.paths.coords):
            coords = np.asarray(pane.paths.coords[chosen[0]], np.float64)  # (layers + 1, 2)
            path.setData(coords[:, 0], coords[:, 1])
            linked["path"] = coords
        else:
            path.setData([], [])
        pane.linked = linked

    return reflect


def link_positions(pane: Any, controller: Any) -> Any:
    band = pg.PlotDataItem(pen=MARK_PEN)
    pane.angle_plot.addItem(band, ignoreBounds=True)

    def reflect() -> None:
        view, pos = pane.view, controller.token
        rope = getattr(pane, "rope", None) if view is not None and view.rope else None
        if rope is None or not 0 <= pos < rope.angles.shape[0]:
            band.setData([], [])
            pane.linked = {}
            return
        band.setData(*rect_xy(0, pos, rope.angles.shape[1], pos + 1))
        pane.linked = {"angle_row": np.asarray(rope.angles[pos]).copy()}

    return reflect


LINKERS = {
    "Tokens": link_tokens,
    "Attention": link_attention,
    "Layer stack": link_layers,
    "Embeddings": link_embeddings,
    "Positions": link_positions,
}


def link_panes(panes: dict[str, Any], controller: Any) -> None:
    """Install the selection marks and gestures on every pane that shows tokens."""
    for title, pane in panes.items():
        pane.linked = {}
        maker = LINKERS.get(title)
        if maker is None:
            continue
        reflect = maker(pane, controller)
        pane.after_render.append(reflect)
        controller.sig_token_selected.connect(lambda _p, r=reflect: r())
