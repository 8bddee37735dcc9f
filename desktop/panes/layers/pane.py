"""The layer stack: how the residual stream grows through the layers, and what it "means".

Norms come straight from the selected step's record; the logit lens (final norm + unembedding
applied to every layer's residual) is asked of the worker for the selected step only, because it
costs 31 unembeddings of the whole vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QLabel, QSplitter, QTabWidget, QVBoxLayout, QWidget

from llm_lens.core import cards as ex
from llm_lens.desktop.panes.layers.lens_table import (
    LENS_K,
    build_lens_table,
    fill_lens_table,
    shown,
)
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.selection import first_position_of
from llm_lens.desktop.widgets.marks import MARK_PEN, rect_xy
from llm_lens.desktop.widgets.pane import ContextTarget, Pane, steady_axes
from llm_lens.desktop.widgets.residual_dialog import residual_offers

NAN_RED = "#ef5350"  # where the model computed NaN or Inf
PROMPT_LENS_TOKENS = 1024  # the prompt lens unembeds every layer at every position: past this
# many positions it is minutes of the worker (8,192 tokens: 31 × 8,192 unembeddings, ~5 min here)
WAIT_TEXT = "lens computed when the run ends or when you select a step"

RESID_TITLE = "residual stream norm"


class LayerStackPane(Pane):
    """Residual norm and per-layer update norms of the selected step, with the logit lens."""

    title = "Layer stack"
    capability = "residual"  # a served run has none: the note says so (Pane.missing_line)
    empty_text = (
        "What each layer would predict if it were the last (the logit lens). Run a prompt "
        "(Ctrl+Enter) to see it."
    )

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self._lens: Any = None  # the LensResult shown in the table
        self._lens_step = -1  # the step that lens belongs to
        self._prompt_lens: Any = None  # the PromptLens shown in the heatmap
        self._step: Any = None
        self._build_norms()
        self._build_lens_table()
        self._build_heatmap()
        self.tabs = QTabWidget()
        self.tabs.addTab(self._lens_box, "Logit lens (this step)")
        self.tabs.addTab(self._heat_box, "Prompt lens (prefill)")
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.norm_view)
        split.addWidget(self.tabs)
        split.setSizes([280, 420])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(split, 1)  # the plots take the height, not the card under them
        self.non_finite_label = QLabel()
        self.non_finite_label.setStyleSheet(f"color: {NAN_RED}")
        layout.addWidget(self.non_finite_label)
        self.streams_label = QLabel()  # several parallel residual streams: what is shown
        self.streams_label.setWordWrap(True)
        self.streams_label.setVisible(False)
        layout.addWidget(self.streams_label)
        controller.sig_busy_changed.connect(self.schedule)
        controller.sig_non_finite.connect(self.mark_non_finite)
        self.mark_non_finite(None)
        self.clear()

    def mark_non_finite(self, placed: Any) -> None:
        """Where the model first computed NaN or Inf: a red line at that layer on both norm
        plots (0 = embeddings; the head past the last layer) and a line naming the sublayer."""
        for line in self.non_finite_lines:
            line.setVisible(placed is not None)
        self.non_finite_label.setVisible(placed is not None)
        if placed is None:
            return
        info = self.controller.info or self.controller.model_info
        last = int(getattr(info, "num_layers", 0) or 0)
        at = 0 if placed.sublayer == "embeddings" else last if placed.layer is None else None
        x = at if at is not None else placed.layer + 1  # layer i's output is point i + 1
        for line in self.non_finite_lines:
            line.setValue(x)
        if self._step is None and last:  # nothing drawn (NaN at the prefill): every layer shown
            self.resid_plot.setXRange(0, last, padding=0.05)
        self.non_finite_label.setText(f"the model computed {placed.label}")

    # ----------------------------------------------------------------- building
    def _build_norms(self) -> None:
        """Two stacked plots: residual norm per layer; attention vs MLP update norms."""
        self.norm_view = pg.GraphicsLayoutWidget()
        self.resid_plot = self.norm_view.addPlot(row=0, col=0, title=RESID_TITLE)
        self.resid_plot.setLabel("left", "‖h‖")
        self.resid_curve = self.resid_plot.plot(
            pen=pg.mkPen("#e0e0e0", width=2), symbol="o", symbolSize=4, symbolBrush="#e0e0e0"
        )
        self.clean_curve = self.resid_plot.plot(  # What if? the clean run's norms
            pen=pg.mkPen(255, 255, 255, 130, width=1.5, style=Qt.PenStyle.DotLine)
        )
        self.update_plot = self.norm_view.addPlot(row=1, col=0, title="what each layer adds")
        self.update_plot.setLabel("left", "‖update‖")
        self.update_plot.setLabel("bottom", "layer (0 = embeddings)")
        self.update_plot.addLegend(offset=(5, 5), labelTextSize="8pt")
        self.attn_curve = self.update_plot.plot(pen=pg.mkPen("#4fc3f7", width=2), name="attention")
        self.mlp_curve = self.update_plot.plot(pen=pg.mkPen("#ffb74d", width=2), name="MLP")
        self.update_plot.setXLink(self.resid_plot)
        steady_axes(self.resid_plot, self.update_plot)
        self.agree_line = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen("#81c784", style=Qt.PenStyle.DashLine)
        )
        self.resid_plot.addItem(self.agree_line)
        self.agree_line.setVisible(False)
        self.non_finite_lines = [
            pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(NAN_RED, width=2))
            for _ in range(2)
        ]
        self.resid_plot.addItem(self.non_finite_lines[0])
        self.update_plot.addItem(self.non_finite_lines[1])

    def _build_lens_table(self) -> None:
        self.lens_table, self.lens_status, self._lens_box = build_lens_table()

    def _build_heatmap(self) -> None:
        """Layer × prompt position image of the lens' top-1 probability, with a colour bar."""
        self.heat_view = pg.GraphicsLayoutWidget()
        self.heat_plot = self.heat_view.addPlot()
        self.heat_plot.setLabel("bottom", "prompt position")
        self.heat_plot.setLabel("left", "layer")
        self.heat_image = pg.ImageItem(axisOrder="row-major")
        self.heat_plot.addItem(self.heat_image)
        self.heat_bar = pg.ColorBarItem(
            values=(0.0, 1.0), colorMap="viridis", interactive=False, label="lens top-1 probability"
        )
        self.heat_bar.setImageItem(self.heat_image, insert_in=self.heat_plot)
        self.heat_plot.scene().sigMouseMoved.connect(self._on_heat_hover)
        self.hover_label = QLabel()
        self.hover_label.setWordWrap(True)
        self._heat_box = QWidget()
        box = QVBoxLayout(self._heat_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.heat_view)
        box.addWidget(self.hover_label)

    # ----------------------------------------------------------------- rendering
    def clear(self) -> None:
        self._lens = self._prompt_lens = self._step = None
        self._lens_step = -1
        for curve in (self.resid_curve, self.attn_curve, self.mlp_curve):
            curve.setData([], [])
        self.agree_line.setVisible(False)
        self.lens_table.clearContents()
        self.lens_table.setRowCount(0)
        self.lens_status.setText("no step selected")
        self.heat_image.setImage(np.zeros((1, 1), np.float32), levels=(0.0, 1.0))
        self.hover_label.setText("select the prefill step (0) to see the lens over the prompt")

    def render(self, step: Any) -> None:
        if step is None:
            self.clear()
            return
        if step is not self._step:
            self._step = step
            self._render_norms(step)
        self._render_lens(step)
        self._render_prompt_lens(step)

    def _render_norms(self, step: Any) -> None:
        note = str(getattr(self.controller.info, "residual_note", "") or "")
        self.streams_label.setText(note[:1].upper() + note[1:] + "." if note else "")
        self.streams_label.setVisible(bool(note))
        resid = step.residual_norms
        layers = np.arange(resid.shape[0])
        self.resid_curve.setData(layers, resid)
        clean = self.clean_step(step)  # What if? the clean run's norms as a faint line
        norms = None if clean is None else clean.residual_norms
        self.clean_curve.setData([] if norms is None else layers, [] if norms is None else norms)
        title = RESID_TITLE + (" (faint: the clean run)" if norms is not None else "")
        if self.resid_plot.titleLabel.text != title:  # a new title re-lays out the plot
            self.resid_plot.setTitle(title)
        self.attn_curve.setData(layers[1:], step.attn_norms)
        self.mlp_curve.setData(layers[1:], step.mlp_norms)

    def _live(self) -> bool:
        """True while the selection follows a running generation: the lens would lag behind."""
        return bool(self.controller.follow_live and self.controller.busy)

    def _render_lens(self, step: Any) -> None:
        """Ask for the selected step's lens, unless the selection is still racing a live run."""
        if self._lens_step != step.index:
            self._lens, self._lens_step = None, -1
            self.lens_table.setRowCount(0)
            self.agree_line.setVisible(False)
        if self._live():
            if self._lens is None:
                self.lens_status.setText(f"step {step.index}: {WAIT_TEXT}")
            return
        lens = self.controller.request_analysis("lens", step=step.index, k=LENS_K)
        if lens is None:
            waiting = self.controller.waiting_text("logit lens", "computing the logit lens…")
            self.lens_status.setText(f"step {step.index}: {waiting}")
        elif lens is not self._lens:
            self._lens, self._lens_step = lens, step.index
            self._fill_lens(lens, step)

    def _fill_lens(self, lens: Any, step: Any) -> None:
        """Fill the table and say where the lens first agrees; the green line marks it."""
        first = fill_lens_table(self.lens_table, self.lens_status, lens, step, self.palette())
        self.agree_line.setVisible(first is not None)
        if first is not None:
            self.agree_line.setValue(first)

    def _render_prompt_lens(self, step: Any) -> None:
        self.tabs.setTabEnabled(1, step.is_prefill)
        if not step.is_prefill and self.tabs.currentIndex() == 1:
            self.tabs.setCurrentIndex(0)
        if not step.is_prefill or self._live():
            return
        tokens = len(self.controller.prompt or ())
        if tokens > PROMPT_LENS_TOKENS:
            self.hover_label.setText(
                f"prompt lens: for prompts up to {PROMPT_LENS_TOKENS:,} tokens (this one has "
                f"{tokens:,}: {self.controller.info.num_layers + 1} × {tokens:,} unembeddings); "
                "the logit lens tab reads any step"
            )
            return
        result = self.controller.request_analysis("prompt_lens")
        if result is None:
            waiting = self.controller.waiting_text("prompt lens", "computing the prompt lens…")
            self.hover_label.setText(waiting)
            return
        if result is self._prompt_lens:
            return
        self._prompt_lens = result
        probs = np.asarray(result.top1_probs)
        self.heat_image.setImage(probs, levels=(0.0, 1.0))
        self.heat_plot.setLimits(xMin=0, xMax=probs.shape[1], yMin=0, yMax=probs.shape[0])
        self.heat_plot.autoRange(padding=0)
        self.hover_label.setText("hover a cell to read the lens' top-1 token there")

    def on_result(self, kind: str, key: object, result: object) -> None:
        if kind in ("lens", "prompt_lens"):
            self.schedule()

    # ----------------------------------------------------------------- hover
    def hover_text(self, layer: int, position: int) -> str:
        """What the heatmap says at (layer, prompt position), or '' outside it."""
        pl, prompt = self._prompt_lens, self.controller.prompt
        if pl is None or not (0 <= layer < pl.top1_ids.shape[0]):
            return ""
        if not 0 <= position < pl.top1_ids.shape[1]:
            return ""
        known = prompt is not None and position < len(prompt.tokens)  # a new run may be starting
        read = f"'{shown(prompt.tokens[position].text)}'" if known else "?"
        where = "embeddings" if layer == 0 else f"layer {layer}"
        p = ex.p3(float(pl.top1_probs[layer, position]))
        return (
            f"position {position} (reads {read}), {where}: lens top-1 "
            f"'{shown(pl.top1_texts[layer][position])}' p={p}"
        )

    def _on_heat_hover(self, pos: QPointF) -> None:
        if self._prompt_lens is None or not self.heat_plot.vb.sceneBoundingRect().contains(pos):
            return
        p = self.heat_plot.vb.mapSceneToView(pos)
        text = self.hover_text(int(np.floor(p.y())), int(np.floor(p.x())))
        if text:
            self.hover_label.setText(text)

    # ----------------------------------------------------------------- its story
    def install_marks(self) -> bool:
        """A box round the selected token's column of the prompt lens; a click on the heatmap
        selects its position, one on a lens cell where that cell's token occurs."""
        self._box = pg.PlotDataItem(pen=MARK_PEN)
        self.heat_plot.addItem(self._box, ignoreBounds=True)
        self.heat_plot.scene().sigMouseClicked.connect(self._heat_clicked)
        self.lens_table.cellClicked.connect(self._lens_cell_clicked)
        return True

    def _heat_clicked(self, ev: Any) -> None:
        vb = self.heat_plot.vb
        if self._prompt_lens is not None and vb.sceneBoundingRect().contains(ev.scenePos()):
            x = int(np.floor(vb.mapSceneToView(ev.scenePos()).x()))
            if 0 <= x < self._prompt_lens.top1_ids.shape[1]:
                self.controller.request_select_token(x)

    def _lens_cell_clicked(self, row: int, column: int) -> None:
        """A lens table cell names a vocabulary token: select where it occurs in the run."""
        lens = self._lens
        if lens is not None and row < lens.top_ids.shape[0]:
            pos = first_position_of(self.controller, int(lens.top_ids[row, column]))
            if pos >= 0:
                self.controller.request_select_token(pos)

    def mark_token(self, position: int) -> None:
        lens = self._prompt_lens
        if lens is None or not 0 <= position < lens.top1_ids.shape[1]:
            self._box.setData([], [])
            self.linked = {}
            return
        self._box.setData(*rect_xy(position, 0, position + 1, lens.top1_ids.shape[0]))
        self.linked = {
            "lens_column": position,
            "lens_top1": tuple(row[position] for row in lens.top1_texts),
        }

    def context_targets(self) -> list[ContextTarget]:
        """A row of the heatmap: the block that wrote it (row r is the stream after block
        r − 1), its attention or MLP turned off or halved (What if?)."""
        return [ContextTarget(self.heat_plot, lambda x, y: self.block_changes(y)
                              + self.residual_changes(x, y))]  # fmt: skip

    def block_changes(self, y: float) -> list[Any]:
        """Row r (r ≥ 1): the parts of block r − 1 the loaded model has, off or halved."""
        rows = 0 if self._prompt_lens is None else self._prompt_lens.top1_ids.shape[0]
        row = int(np.floor(y))
        info = self.controller.model_info
        return layer_block_changes(info, row - 1) if 1 <= row < rows and info else []

    def residual_changes(self, x: float, y: float) -> list[Any]:
        """A residual cell (row r: the stream entering layer r): patched from another prompt or
        pushed by a steering vector, each through a small dialog."""
        shape = None if self._prompt_lens is None else self._prompt_lens.top1_ids.shape
        return residual_offers(self, self.controller, shape, x, y)

    def explainer(self) -> ex.Explainer | None:
        step = self.controller.current_step()
        if step is None:
            return None
        return ex.layers_card(step, self._lens if self._lens_step == step.index else None)

    # ----------------------------------------------------------------- export
    def plot_items(self) -> list[Any]:
        return [self.norm_view.ci, self.heat_plot]

    def csv_table(self) -> tuple[Sequence[str], Sequence[Sequence[Any]]]:
        header = (
            "layer",
            "residual_norm",
            "attn_update_norm",
            "mlp_update_norm",
            "lens_top1_text",
            "lens_top1_prob",
        )
        step = self._step
        if step is None:
            return header, ()
        resid = step.residual_norms
        attn = step.attn_norms
        mlp = step.mlp_norms
        lens = self._lens if self._lens_step == step.index else None
        rows = []
        for layer in range(resid.shape[0]):
            upd = ("", "") if layer == 0 else (float(attn[layer - 1]), float(mlp[layer - 1]))
            top = (
                ("", "")
                if lens is None
                else (lens.top_texts[layer][0], float(lens.top_probs[layer, 0]))
            )
            rows.append((layer, float(resid[layer]), *upd, *top))
        return header, rows


def block_parts(info: Any, layer: int) -> list[str]:
    """What layer ``layer`` of the model ``info`` describes has to scale (core's ``Anatomy``,
    through ``ModelInfo``): "attn" where it computes attention, "mixer" where its token mixer is
    something else (Mamba, DeltaNet, a convolution; both in Falcon-H1), "mlp" where it has one."""
    kinds = getattr(info, "layer_kinds", ()) or ()
    parts = kinds[layer].split(" + ") if layer < len(kinds) else ["attention"]
    attention = [p for p in parts if p.endswith("attention") and p != "linear attention"]
    mixers = [p for p in parts if p not in attention and p != "none"]
    mlps = getattr(info, "layer_mlps", ()) or ()
    mlp = mlps[layer] if layer < len(mlps) else True
    return [name for name, has in (("attn", attention), ("mixer", mixers), ("mlp", mlp)) if has]


def layer_block_changes(info: Any, layer: int) -> list[Any]:
    """The Layer stack's What if? offers for block ``layer``: each part it has, off or halved."""
    from llm_lens.core.interventions import BlockEdit

    parts = block_parts(info, layer)
    return [BlockEdit(layer, part, f) for f in (0.0, 0.5) for part in parts]
