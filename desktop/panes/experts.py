"""Experts pane: in a mixture-of-experts model, which experts each token went to.

Left: the selected token's router probabilities, MoE layer × expert, with the experts the router
chose framed and labelled with the weights the block added their outputs with; the colour scale
is 0..1 (a probability), so it never tops out below a number written on it. Right: every
token read so far × expert: how many layers sent it to each expert, or one layer's weights. The
numbers are the routers' own outputs, recorded in the step loop (:mod:`llm_lens.core.experts`).
A dense model has no router: the pane says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from llm_lens.core import cards as ex
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.selection import context_tokens
from llm_lens.desktop.state.whatif import expert_changes
from llm_lens.desktop.widgets.pane import ContextTarget, Pane, steady_axes
from llm_lens.desktop.widgets.token_text import label_step, visible_text
from llm_lens.desktop.widgets.whatif_mark import (
    CLEAN_PEN,
    WhatIfMark,
    lost_choices,
    routing_difference,
)

DENSE = "this model has no experts (dense MLP): every token goes through the same MLP in each layer"
ALL_LAYERS = "all layers: how many sent it to each expert"
MAX_LABELLED = (16, 40)  # experts, layers: up to this many, every chosen cell shows its weight


class _TokenImage(pg.ImageItem):
    """The token × expert image; a click selects the token of its row.

    Signals:
        sig_clicked(float): the image row (pixels) of a click.
    """

    sig_clicked = Signal(float)

    def __init__(self) -> None:
        super().__init__(axisOrder="row-major")

    def mouseClickEvent(self, ev: Any) -> None:  # noqa: N802 (Qt override)
        self.sig_clicked.emit(float(ev.pos().y()))
        ev.accept()


class ExpertsPane(Pane):
    """Router probabilities and chosen experts per layer, and the experts of every token."""

    title = "Experts"
    capability = "routing"  # a served run has none: the note says so (Pane.missing_line)
    empty_text = (
        "Which experts each token's router picks (mixture-of-experts models). Run a "
        "prompt (Ctrl+Enter) to see it."
    )
    card_follows_token = True
    live_interval_ms = 100

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.routing: Any = None  # the shown token's one-row ExpertRouting
        self.context: Any = None  # every read position's routing up to the selected step
        self.position = -1
        self._texts: list[Any] = []  # pooled TextItems for the chosen weights
        self._layers_key: tuple[int, ...] = ()
        self._build_controls()
        self._build_plots()
        controller.sig_token_selected.connect(lambda _p: self.schedule())
        self.clear()

    # ----------------------------------------------------------------- construction
    def _build_controls(self) -> None:
        self.layer_choice = QComboBox()
        self.layer_choice.setToolTip("What the token × expert map shows on the right")
        self.layer_choice.currentIndexChanged.connect(self.schedule)
        self.header = QLabel(wordWrap=True)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.dense_label = QLabel(DENSE, wordWrap=True, alignment=Qt.AlignmentFlag.AlignCenter)
        self.choice_label = QLabel("Tokens:")
        row = QHBoxLayout()
        row.addWidget(self.choice_label)
        row.addWidget(self.layer_choice, 1)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(2, 2, 2, 2)
        self._layout.addLayout(row)
        self.whatif_mark = WhatIfMark()
        self._layout.addWidget(self.whatif_mark)
        self._layout.addWidget(self.header)
        self._layout.addWidget(self.dense_label, 1)
        self.readout = QLabel(wordWrap=True, toolTip="What is under the mouse")

    def _build_plots(self) -> None:
        self.graphics = pg.GraphicsLayoutWidget()
        self._layout.addWidget(self.graphics, 1)
        plot = self.layer_plot = self.graphics.addPlot(row=0, col=0, title="router probability")
        plot.setLabel("left", "layer")
        plot.setLabel("bottom", "expert")
        self.image = pg.ImageItem(axisOrder="row-major")
        plot.addItem(self.image)
        self.bar = pg.ColorBarItem(values=(0, 1), colorMap="viridis", interactive=False, width=10)
        self.bar.setImageItem(self.image, insert_in=plot)
        # sizes in data units (one cell is 1 × 1), so a frame never outgrows its cell
        self.chosen = pg.ScatterPlotItem(
            symbol="s", pen=pg.mkPen("w", width=2), brush=None, pxMode=False
        )
        plot.addItem(self.chosen)
        self.clean_chosen = pg.ScatterPlotItem(  # What if? the clean run's lost choices
            symbol="s", pen=CLEAN_PEN, brush=None, pxMode=False, size=0.7
        )
        plot.addItem(self.clean_chosen)
        tokens = self.token_plot = self.graphics.addPlot(row=0, col=1, title="experts per token")
        tokens.setLabel("bottom", "expert")
        self.token_image = _TokenImage()
        self.token_image.setColorMap(pg.colormap.get("magma"))
        self.token_image.sig_clicked.connect(self._row_clicked)
        tokens.addItem(self.token_image)
        self.cursor = pg.PlotDataItem(pen=pg.mkPen("#4fc3f7", width=2))
        tokens.addItem(self.cursor)
        for p in (plot, tokens):
            p.invertY(True)
            p.setMenuEnabled(False)
            p.setMouseEnabled(False, False)
        steady_axes(plot, tokens)
        tokens.getAxis("left").setStyle(textFillLimits=[(0, 0.95)])  # label_step spaces them
        self.graphics.ci.layout.setColumnStretchFactor(0, 3)
        self.graphics.ci.layout.setColumnStretchFactor(1, 2)
        self._layout.addWidget(self.readout)
        self.graphics.scene().sigMouseMoved.connect(self._moved)

    # ----------------------------------------------------------------- interaction
    def _row_clicked(self, y: float) -> None:
        ctx = self.context
        if ctx is not None and 0 <= int(y) < ctx.rows:
            self.controller.request_select_token(int(ctx.first_position + int(y)))

    def _moved(self, scene_pos: Any) -> None:
        """The readout line: the numbers of the cell under the mouse."""
        for plot, text_of in ((self.layer_plot, self.cell_text),
                              (self.token_plot, self.token_cell_text)):  # fmt: skip
            box = plot.getViewBox()
            if box.sceneBoundingRect().contains(scene_pos):
                p = box.mapSceneToView(scene_pos)
                text = text_of(p.x(), p.y())
                if text:
                    self.readout.setText(text)

    def cell_text(self, x: float, y: float) -> str:
        """'layer 3, expert 5: router probability 0.132 · chosen, weight 0.53' ('' outside)."""
        r = self.routing
        row, expert = int(np.floor(y)), int(np.floor(x))
        if r is None or not (0 <= row < len(r.layers) and 0 <= expert < r.num_experts):
            return ""
        picked = [j for j in range(r.top_k) if int(r.experts[row, 0, j]) == expert]
        chosen = f"chosen, weight {float(r.weights[row, 0, picked[0]]):.3f}" if picked else ""
        return (
            f"position {self.position}, layer {int(r.layers[row])}, expert {expert}: router "
            f"probability {float(r.probs[row, 0, expert]):.4f} · {chosen or 'not chosen'}"
        )

    def token_cell_text(self, x: float, y: float) -> str:
        """'position 4 'fox', expert 2: sent there by 3 of 6 layers' ('' outside)."""
        ctx = self.context
        row, expert = int(np.floor(y)), int(np.floor(x))
        if ctx is None or not (0 <= row < ctx.rows and 0 <= expert < ctx.num_experts):
            return ""
        position = ctx.first_position + row
        texts = self._token_texts()
        text = visible_text(texts[position], 16) if position < len(texts) else "?"
        where = f"position {position} '{text}', expert {expert}: "
        index = self.layer_choice.currentIndex()
        if index <= 0:
            layers = int((np.asarray(ctx.experts[:, row]) == expert).any(axis=-1).sum())
            return where + f"sent there by {layers} of {len(ctx.layers)} layers · click to select"
        weight = float(ctx.chosen_matrix()[index - 1, row, expert])
        layer = int(ctx.layers[index - 1])
        return where + (f"layer {layer} weight {weight:.3f}" if weight else f"not in layer {layer}")

    # ----------------------------------------------------------------- render
    def render(self, step: Any) -> None:
        from llm_lens.core.experts import context_routing, routing_at

        ctl = self.controller
        if step is None or ctl.prompt is None:
            self.clear()
            return
        if step.routing is None:
            self._show_dense(True)
            return
        self._show_dense(False)
        read = ctl.steps[: step.index + 1]
        self.context = context_routing(read)
        chosen = ctl.token if 0 <= ctl.token <= step.position else step.position
        self.routing = routing_at(read, chosen) or step.routing.row(-1)
        self.position = self.routing.first_position
        self._sync_layers(self.routing)
        self._render_router(self.routing)
        self._render_tokens(self.context)
        self._render_clean(read)
        self.header.setText(self.summary())

    def _render_clean(self, read: Sequence[Any]) -> None:
        """What if? Dashed frames on the experts the clean run chose for the shown token and
        this run did not, and the mark's line (how much of the routing moved)."""
        ctl, pos = self.controller, self.position
        owner = next((s for s in read if s.routing is not None
                      and 0 <= pos - s.routing.first_position < s.routing.rows), None)  # fmt: skip
        clean = self.clean_step(owner) if ctl.interventions and owner is not None else None
        text, clean_row = routing_difference(owner, clean, self.routing, pos)
        xs, ys = lost_choices(self.routing, clean_row) if clean_row is not None else ([], [])
        self.clean_chosen.setData(xs, ys)
        self.whatif_mark.show_run(ctl.interventions, text)

    def _show_dense(self, dense: bool) -> None:
        self.dense_label.setText(DENSE)
        self.dense_label.setVisible(dense)
        self.graphics.setVisible(not dense)
        for widget in (self.layer_choice, self.choice_label, self.readout):
            widget.setVisible(not dense)  # nothing to choose or hover without experts
        if dense:
            self.header.setText("")
            self.routing = self.context = None
            self.whatif_mark.show_run(self.controller.interventions, "this model has no experts")

    def _sync_layers(self, routing: Any) -> None:
        """The layer choice follows the model's MoE layers."""
        key = tuple(int(n) for n in routing.layers)
        if key == self._layers_key:
            return
        self._layers_key = key
        with QSignalBlocker(self.layer_choice):
            self.layer_choice.clear()
            self.layer_choice.addItem(ALL_LAYERS)
            for n in key:
                self.layer_choice.addItem(f"layer {n}: weight of each chosen expert")
        left = [(i + 0.5, str(n)) for i, n in enumerate(key)]
        every = max(1, len(left) // 16)
        self.layer_plot.getAxis("left").setTicks([left[::every]])
        experts = routing.num_experts
        ticks = [(e + 0.5, str(e)) for e in range(0, experts, max(1, -(-experts // 8)))]
        for plot in (self.layer_plot, self.token_plot):
            plot.getAxis("bottom").setTicks([ticks])
        self.layer_plot.setRange(xRange=(0, experts), yRange=(0, len(key)), padding=0)

    def _render_router(self, r: Any) -> None:
        probs = np.asarray(r.probs[:, 0])  # (moe_layers, experts)
        self.image.setImage(probs, levels=(0.0, 1.0))  # a probability's whole scale: a bar
        self.bar.setLevels((0.0, 1.0))  # to the row's largest read 0.45 over cells of 0.62
        experts, weights = np.asarray(r.experts[:, 0]), np.asarray(r.weights[:, 0])
        rows = np.repeat(np.arange(experts.shape[0]), experts.shape[1])
        xs, ws = experts.ravel() + 0.5, weights.ravel()
        labelled = r.num_experts <= MAX_LABELLED[0] and len(r.layers) <= MAX_LABELLED[1]
        sizes = 0.35 + 0.55 * np.clip(np.abs(ws) / max(float(np.abs(ws).max()), 1e-9), 0, 1)
        self.chosen.setData(xs, rows + 0.5, size=np.full(ws.shape, 0.9) if labelled else sizes)
        self._label_weights(xs, rows + 0.5, ws if labelled else np.zeros(0))

    def _label_weights(self, xs: np.ndarray, ys: np.ndarray, ws: np.ndarray) -> None:
        while len(self._texts) < len(ws):
            text = pg.TextItem(color="w", anchor=(0.5, 0.5))
            text.setZValue(10)
            self.layer_plot.addItem(text)
            self._texts.append(text)
        for i, item in enumerate(self._texts):
            if i < len(ws):
                item.setText(f"{ws[i]:.2f}")
                item.setPos(float(xs[i]), float(ys[i]))
            item.setVisible(i < len(ws))

    def token_matrix(self, ctx: Any) -> tuple[np.ndarray, float]:
        """(rows, experts) image and its top level for the layer choice: counts or weights."""
        index = self.layer_choice.currentIndex()
        if index <= 0:
            counts = np.zeros((ctx.rows, ctx.num_experts), np.float32)
            for layer in range(len(ctx.layers)):
                counts[np.arange(ctx.rows)[:, None], ctx.experts[layer]] += 1
            return counts, float(len(ctx.layers))
        weights = ctx.chosen_matrix()[index - 1]  # (rows, experts)
        return weights, float(max(np.abs(weights).max(), 1e-6))

    def _render_tokens(self, ctx: Any) -> None:
        image, top = self.token_matrix(ctx)
        self.token_image.setImage(image, levels=(0.0, top))
        self.token_plot.setRange(xRange=(0, ctx.num_experts), yRange=(0, ctx.rows), padding=0)
        row = self.position - ctx.first_position
        self.cursor.setData([0, ctx.num_experts, ctx.num_experts, 0, 0],
                            [row, row, row + 1, row + 1, row])  # fmt: skip
        texts = self._token_texts()
        labels = [visible_text(texts[p]) if p < len(texts) else "" for p in ctx.positions]
        metrics = QFontMetrics(self.token_plot.getAxis("left").style["tickFont"] or QFont())
        box = self.token_plot.getViewBox()
        every = label_step(ctx.rows, box.height(), metrics.height() * 1.3 + 2)
        ticks = [(i + 0.5, labels[i]) for i in range(0, ctx.rows, every)]
        axis = self.token_plot.getAxis("left")
        widest = max((metrics.horizontalAdvance(t) for _, t in ticks), default=0) + 12
        if widest > axis.width():  # a label wider than the axis would not be drawn
            axis.setWidth(widest)
        axis.setTicks([ticks])

    def _token_texts(self) -> list[str]:
        ctl = self.controller
        return [t.text for t in ctl.prompt.tokens] + [s.token.text for s in ctl.steps]

    def summary(self) -> str:
        """One line: the experts, k, how the weights are made, and the shown token's route."""
        r = self.routing
        if r is None:
            return ""
        texts = self._token_texts()
        text = visible_text(texts[self.position], 16) if self.position < len(texts) else "?"
        layer = max(0, self.layer_choice.currentIndex() - 1)
        pairs = zip(r.experts[layer, 0], r.weights[layer, 0], strict=True)
        went = ", ".join(f"{int(e)} ({w:.2f})" for e, w in pairs)
        return (
            f"{r.num_experts} experts, {r.top_k} chosen per token ({r.scoring} router) in "
            f"{len(r.layers)} layers · position {self.position} '{text}': layer "
            f"{int(r.layers[layer])} sent it to experts {went} · left: colour the router "
            "probability (0–1), numbers the chosen experts' weights"
        )

    # ----------------------------------------------------------------- its story
    def context_targets(self) -> list[ContextTarget]:
        """An expert of a layer's router: forbid it, or route only to it (What if?)."""
        return [ContextTarget(self.layer_plot, self.expert_changes)]

    def expert_changes(self, x: float, y: float) -> list[Any]:
        r = self.routing
        row, expert = int(np.floor(y)), int(np.floor(x))
        if r is None or not (0 <= row < len(r.layers) and 0 <= expert < r.num_experts):
            return []
        return expert_changes(int(r.layers[row]), expert)

    def explainer(self) -> ex.Explainer | None:
        ctl = self.controller
        step = ctl.current_step()
        if step is None:
            return None
        name = getattr(ctl.info, "name", "This model")
        if step.routing is None or self.routing is None:
            return ex.experts_card(None, None, name) if step.routing is None else None
        tokens = context_tokens(ctl)
        text = tokens[self.position].text if 0 <= self.position < len(tokens) else None
        return ex.experts_card(self.routing, text, name)

    # ----------------------------------------------------------------- clear / export
    def clear(self) -> None:
        self.routing = self.context = None
        self.position = -1
        self.image.clear()
        self.token_image.clear()
        self.chosen.setData([], [])
        self.clean_chosen.setData([], [])
        self.whatif_mark.show_run(())
        self.cursor.setData([], [])
        for item in self._texts:
            item.setVisible(False)
        self.header.setText("")
        self.readout.setText("")
        self.dense_label.setText("no run yet: the routers' choices appear after a run")
        self.dense_label.setVisible(True)
        self.graphics.setVisible(False)
        for widget in (self.layer_choice, self.choice_label, self.readout):
            widget.setVisible(False)

    def plot_items(self) -> list[Any]:
        return [self.layer_plot, self.token_plot]

    def csv_table(self) -> tuple[Sequence[str], Sequence[Sequence[Any]]]:
        r = self.routing
        header = ("position", "layer", "expert", "router probability", "chosen weight")
        if r is None:
            return header, []
        chosen = r.chosen_matrix()[:, 0]  # (moe_layers, experts)
        rows = [
            (self.position, int(n), e, float(r.probs[i, 0, e]), float(chosen[i, e]))
            for i, n in enumerate(r.layers)
            for e in range(r.num_experts)
        ]
        return header, rows
