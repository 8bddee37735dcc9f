"""Embeddings pane: where tokens sit in the model's input space, and how the residual moves.

Mode "vocabulary" draws all vocabulary rows of the input embedding (PCA to 2-D) once per
model and highlights the prompt's and the response's tokens; a click asks the worker for a
token's nearest neighbours. Mode "layer paths" draws each prompt token's residual stream
from the embedding through every layer, projected by a PCA fitted on those states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6 import QtWidgets as qw
from PySide6.QtCore import QPointF, Qt

from llm_lens.core import cards as ex
from llm_lens.desktop.panes.embeddings.labels import (
    Labels,
    distinct,
    nearest_point,
)
from llm_lens.desktop.panes.embeddings.paths import build_paths_plot, draw_paths, fit_paths_view
from llm_lens.desktop.panes.embeddings.readouts import (
    SelectionMarks,
    card_of,
    clean_token_note,
    path_rows,
    path_text,
    point_text,
    vocab_rows,
)
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.selection import first_position_of, selected_token
from llm_lens.desktop.widgets.common import ElidedLabel
from llm_lens.desktop.widgets.pane import HoverTarget, Pane
from llm_lens.desktop.widgets.token_text import visible_text
from llm_lens.desktop.widgets.whatif_mark import CLEAN_PEN, WhatIfMark

HOVER_PX = 8  # how close (in pixels) the mouse must be to a point to name it
MODES = ("vocabulary", "layer paths")


class EmbeddingsPane(Pane):
    """Vocabulary map with highlighted prompt/response tokens, or per-token layer paths."""

    title = "Embeddings"
    capability = "residual"  # a served run has none: the note says so (Pane.missing_line)
    empty_text = (
        "Each token's vector drawn in 2-D, and its path through the layers. Run a prompt "
        "(Ctrl+Enter) to see it."
    )
    card_follows_token = True

    def __init__(self, controller: Controller, parent: qw.QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.projection: Any = None
        self.paths: Any = None
        self.vocab_set_count = 0  # setData calls on the big scatter (once per model)
        self._vocab_model: str | None = None
        self._paths_run = -1
        self._texts: dict[int, str] = {}  # id -> text of every token whose text we have seen
        self._seen_steps = 0
        self._asked_neighbours = -1
        self.prompt_ids: list[int] = []
        self.response_ids: list[int] = []
        self._build_widgets()
        self._build_vocab_plot()
        build_paths_plot(self)

    # ----------------------------------------------------------------- construction
    def _build_widgets(self) -> None:
        self.mode = qw.QComboBox()
        self.mode.addItems(MODES)
        self.mode.currentIndexChanged.connect(self._mode_changed)
        self.explained = ElidedLabel(min_chars=10)
        self.hover = ElidedLabel(min_chars=10)
        self.stack = qw.QStackedWidget()
        self.neighbour_title = qw.QLabel("Click a token for its nearest neighbours")
        self.neighbour_title.setWordWrap(True)
        self.neighbour_list = qw.QListWidget()
        self.neighbour_list.itemActivated.connect(self._neighbour_activated)
        top = qw.QHBoxLayout()
        top.addWidget(qw.QLabel("Show"))
        top.addWidget(self.mode)
        top.addWidget(self.explained, 1)
        self.neighbour_box = qw.QWidget()  # the vocabulary map's: hidden with layer paths
        side = qw.QVBoxLayout(self.neighbour_box)
        side.setContentsMargins(0, 0, 0, 0)
        side.addWidget(self.neighbour_title)
        side.addWidget(self.neighbour_list, 1)
        body = qw.QHBoxLayout()
        body.addWidget(self.stack, 4)
        body.addWidget(self.neighbour_box, 1)
        layout = qw.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        self.whatif_mark = WhatIfMark()
        layout.addWidget(self.whatif_mark)
        layout.addLayout(top)
        layout.addLayout(body, 1)
        layout.addWidget(self.hover)

    def _build_vocab_plot(self) -> None:
        self.vocab_widget = pg.PlotWidget()
        self.stack.addWidget(self.vocab_widget)
        plot = self.vocab_plot = self.vocab_widget.getPlotItem()
        plot.setLabel("bottom", "PC1")
        plot.setLabel("left", "PC2")
        plot.setMenuEnabled(False)
        self.vocab = pg.ScatterPlotItem(
            pxMode=True, size=2, pen=None, brush=pg.mkBrush(150, 150, 190, 70), useCache=True
        )
        # drawn once into a pixmap, redrawn only when the view moves: repainting the highlights
        # over 49,152 points cost ~15 ms a step
        self.vocab.setCacheMode(qw.QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.prompt_dots = pg.ScatterPlotItem(size=8, pen=pg.mkPen("w"), brush=pg.mkBrush("c"))
        self.response_dots = pg.ScatterPlotItem(
            size=9, symbol="s", pen=pg.mkPen("w"), brush=pg.mkBrush(255, 150, 0)
        )
        self.neighbour_dots = pg.ScatterPlotItem(size=10, symbol="x", pen=None, brush="m")
        self.clean_dot = pg.ScatterPlotItem(size=18, pen=CLEAN_PEN, brush=None)  # What if?
        for item in (self.vocab, self.prompt_dots, self.response_dots, self.neighbour_dots,
                     self.clean_dot):  # fmt: skip
            plot.addItem(item)
        self.vocab_labels = Labels(plot)
        self._hover_proxy = pg.SignalProxy(
            plot.scene().sigMouseMoved, rateLimit=30, slot=lambda args: self._on_hover(args[0])
        )
        plot.scene().sigMouseClicked.connect(self._on_click)

    # ----------------------------------------------------------------- events
    def _mode_changed(self, _index: int) -> None:
        """Each mode shows only its own parts: the neighbour list belongs to the vocabulary map,
        and the note above the plot is redrawn for the new mode."""
        vocabulary = self.mode.currentIndex() == 0
        self.stack.setCurrentIndex(self.mode.currentIndex())
        self.neighbour_box.setVisible(vocabulary)
        self.explained.setText("")
        self._paths_run = -1  # the paths note is written when the paths are drawn
        self.schedule()

    def on_result(self, kind: str, key: object, result: object) -> None:
        if kind in ("embedding_projection", "hidden_paths"):
            self.schedule()
        elif kind == "neighbours" and getattr(result, "token_id", None) == self._asked_neighbours:
            self._show_neighbours(result)

    def nearest(self, x: float, y: float, max_px: float = HOVER_PX) -> int | None:
        """Vocabulary id of the point nearest to view coordinates (x, y), highlighted first."""
        if self.projection is None:
            return None
        pixel = self.vocab_plot.getViewBox().viewPixelSize()
        first = self.response_ids + self.prompt_ids
        return nearest_point(self.projection.coords, first, pixel, x, y, max_px)

    def _view_point(self, scene_pos: QPointF) -> QPointF | None:
        vb = self.vocab_plot.getViewBox()
        if not vb.sceneBoundingRect().contains(scene_pos):
            return None
        return vb.mapSceneToView(scene_pos)

    def _on_hover(self, scene_pos: QPointF) -> None:
        point = self._view_point(scene_pos)
        token = None if point is None else self.nearest(point.x(), point.y())
        if token is None:
            self.hover.setText("")
            return
        text = self._texts.get(token)
        shown = repr(text) if text is not None else "(text not loaded: click for neighbours)"
        self.hover.setText(f"token {token}: {shown}")

    def _on_click(self, ev: Any) -> None:
        point = self._view_point(ev.scenePos())
        token = None if point is None else self.nearest(point.x(), point.y())
        if token is not None:
            self.select_token(token)

    def _neighbour_activated(self, item: qw.QListWidgetItem) -> None:
        self.select_token(int(item.data(Qt.ItemDataRole.UserRole)))

    def select_token(self, token_id: int) -> None:
        """Ask for ``token_id``'s nearest neighbours; shown now if cached, else on arrival."""
        self._asked_neighbours = token_id
        name = self._texts.get(token_id)
        self.neighbour_title.setText(
            f"Nearest to {token_id} {name!r}:" if name is not None else f"Nearest to {token_id}:"
        )
        self.neighbour_list.clear()
        result = self.controller.request_analysis("neighbours", token_id=token_id)
        if result is not None:
            self._show_neighbours(result)

    def _show_neighbours(self, result: Any) -> None:
        self.neighbour_list.clear()
        for tid, text, sim in zip(result.ids, result.texts, result.similarities, strict=True):
            self._texts.setdefault(int(tid), text)
            item = qw.QListWidgetItem(f"cosine {sim:.3f}  {visible_text(text, 24)}  ({int(tid)})")
            item.setData(Qt.ItemDataRole.UserRole, int(tid))
            item.setData(Qt.ItemDataRole.UserRole + 1, float(sim))
            self.neighbour_list.addItem(item)
        if self.projection is not None:
            self.neighbour_dots.setData(pos=self.projection.coords[np.asarray(result.ids)])

    # ----------------------------------------------------------------- render
    def render(self, step: Any) -> None:
        ctl = self.controller
        if ctl.info is None:
            return
        self._learn_texts()
        if self.mode.currentIndex() == 0:
            self._render_vocab(step)
        else:
            self._render_paths()
        self._render_clean(step)

    def _render_clean(self, step: Any) -> None:
        """What if? The mark's line, and a dashed ring on the token the clean run chose here
        where it chose another."""
        paths = self.mode.currentIndex() != 0
        text, clean_id = clean_token_note(step, self.clean_step(step), paths)
        coords = None if self.projection is None else self.projection.coords
        ring = [] if clean_id is None or coords is None else [coords[clean_id]]
        self.clean_dot.setData(pos=np.array(ring, np.float64).reshape(-1, 2))
        self.whatif_mark.show_run(self.controller.interventions, text)

    def _learn_texts(self) -> None:
        """Remember the texts the records carry (prompt, chosen and top tokens) for hovering."""
        ctl = self.controller
        if ctl.prompt is not None and self._seen_steps == 0:
            self._texts.update((t.id, t.text) for t in ctl.prompt.tokens)
        for record in ctl.steps[self._seen_steps :]:
            self._texts.update(zip(record.top_ids.tolist(), record.top_texts, strict=True))
            self._texts[record.token.id] = record.token.text
        self._seen_steps = len(ctl.steps)

    def _render_vocab(self, step: Any) -> None:
        ctl = self.controller
        if self._vocab_model != ctl.info.weights_id:
            proj = ctl.request_analysis("embedding_projection")
            if proj is None:
                waiting = ctl.waiting_text("vocabulary projection", "projecting the vocabulary…")
                self.explained.setText(waiting)
                return
            self._set_vocab(proj, ctl.info.weights_id)
        share = self.projection.explained
        self.explained.setText(
            f"PCA of all {len(self.projection.coords):,} input embeddings: "
            f"PC1 {share[0]:.1%}, PC2 {share[1]:.1%} of the variance"
        )
        self._render_overlay(step)

    def _set_vocab(self, proj: Any, model: str) -> None:
        """The one expensive call (~180 ms): every vocabulary row, once per model."""
        self.projection = proj
        self._vocab_model = model
        self.vocab.setData(pos=proj.coords)
        self.vocab_set_count += 1
        vb = self.vocab_plot.getViewBox()
        vb.autoRange(padding=0.02)
        vb.disableAutoRange()

    def _render_overlay(self, step: Any) -> None:
        """Prompt and response tokens up to the selected step, labelled (reused TextItems)."""
        ctl = self.controller
        coords = self.projection.coords
        self.prompt_ids = distinct(ctl.prompt.ids) if ctl.prompt is not None else []
        upto = ctl.steps[: step.index + 1] if step is not None else []
        self.response_ids = distinct(r.token.id for r in upto)
        self.prompt_dots.setData(pos=coords[np.array(self.prompt_ids, np.int64)].reshape(-1, 2))
        self.response_dots.setData(pos=coords[np.array(self.response_ids, np.int64)].reshape(-1, 2))
        labelled = distinct(self.response_ids[::-1] + self.prompt_ids)
        self.vocab_labels.set(
            [(coords[i], visible_text(self._texts.get(i, str(i)), 12)) for i in labelled]
        )

    def _render_paths(self) -> None:
        ctl = self.controller
        if self._paths_run == ctl.run_id or ctl.prompt is None:
            return
        paths = ctl.request_analysis("hidden_paths")
        if paths is None:
            self.explained.setText("projecting the residual stream…")
            return
        self.paths, self._paths_run = paths, ctl.run_id
        draw_paths(self, paths.coords, ctl.prompt.tokens)
        share = paths.explained
        note = f"PCA of the prompt's residual states: PC1 {share[0]:.1%}, PC2 {share[1]:.1%}"
        far = fit_paths_view(self, paths.coords)
        if far:
            names = ", ".join(
                f"{p} {visible_text(ctl.prompt.tokens[p].text, 12)!r}" for p in far[:3]
            )
            note += f"; off-scale (zoom out): {names}"
        self.explained.setText(note)

    # ----------------------------------------------------------------- clear / export
    def clear(self) -> None:
        """A new run drops the overlay and paths; a new model also drops the vocabulary map."""
        info = self.controller.info
        if info is None or info.weights_id != self._vocab_model:
            self.vocab.clear()
            self.projection, self._vocab_model, self._texts = None, None, {}
        self.prompt_ids, self.response_ids = [], []
        for item in (
            self.prompt_dots,
            self.response_dots,
            self.neighbour_dots,
            self.clean_dot,
            self.start_dots,
            self.end_dots,
            *self.segments,
        ):
            item.setData([], [])
        self.vocab_labels.set([])
        self.path_labels.set([])
        self.whatif_mark.show_run(())
        self.paths, self._paths_run, self._seen_steps = None, -1, 0
        self.neighbour_list.clear()

    # ----------------------------------------------------------------- its story
    def install_marks(self) -> bool:
        """A ring on the selected token's point and its path; a click on a point selects
        where that token occurs in the run."""
        self._marks = SelectionMarks(self.vocab_plot, self.paths_plot)
        self.vocab_plot.scene().sigMouseClicked.connect(self._select_clicked)
        return True

    def _select_clicked(self, ev: Any) -> None:
        point = self._view_point(ev.scenePos())
        token = None if point is None else self.nearest(point.x(), point.y())
        if token is not None:
            pos = first_position_of(self.controller, token)
            if pos >= 0:
                self.controller.request_select_token(pos)

    def mark_token(self, position: int) -> None:
        chosen = selected_token(self.controller)
        self.linked = self._marks.show(self.projection, self.paths, chosen)

    def point_text(self, x: float, y: float) -> str:
        """A vocabulary point: token, its PCA coordinates, and its embedding norm where known."""
        token = self.nearest(x, y)
        if token is None:
            return ""
        xy = self.projection.coords[token]
        return point_text(self.controller, token, xy, self._texts.get(token))

    def path_point_text(self, x: float, y: float) -> str:
        """The nearest point of the layer paths: position, token, layer, coordinates, ‖h‖."""
        if self.paths is None:
            return ""
        pixel = self.paths_plot.getViewBox().viewPixelSize()
        return path_text(self.controller, self.paths.coords, pixel, x, y)

    def hover_targets(self) -> list[HoverTarget]:
        return [
            HoverTarget(self.vocab_plot, self.point_text),
            HoverTarget(self.paths_plot, self.path_point_text),
        ]

    def readout_label(self) -> qw.QLabel:
        """Its own hover line, which the readout replaces (it says more: coordinates, norm)."""
        self._hover_proxy.disconnect()
        return self.hover

    def explainer(self) -> ex.Explainer | None:
        return card_of(self.controller, self.projection)

    # ----------------------------------------------------------------- export
    def plot_items(self) -> list[Any]:
        return [self.vocab_plot if self.mode.currentIndex() == 0 else self.paths_plot]

    def csv_table(self) -> tuple[Sequence[str], Sequence[Sequence[Any]]]:
        if self.mode.currentIndex() == 0:
            coords = None if self.projection is None else self.projection.coords
            ids = distinct(self.prompt_ids + self.response_ids)
            return ("token id", "text", "x", "y"), vocab_rows(coords, ids, self._texts)
        prompt = self.controller.prompt
        coords = None if self.paths is None or prompt is None else self.paths.coords
        return ("position", "token", "layer", "x", "y"), path_rows(coords, prompt)
