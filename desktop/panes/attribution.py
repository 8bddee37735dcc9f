"""Why this token? Direct logit attribution, input attribution and the information-flow graph
of the selected step's chosen token, computed on the worker on demand (``explain`` analysis).

It computes when shown and no run is streaming, or at once when asked ("Why this token?" on a
token chip, or the Explain button). Clicking a head (heatmap) or an attention edge (graph)
shows that layer and head in the Attention pane and marks the edge's source token here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QGraphicsOpacityEffect,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSlider,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core import cards as ex
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.whatif import head_changes
from llm_lens.desktop.widgets.flow_view import FlowView
from llm_lens.desktop.widgets.pane import ContextTarget, Pane, steady_axes
from llm_lens.desktop.widgets.token_text import Chip, ChipView, piece_label

VS_CHOICES = 8  # the alternatives offered: the step's top tokens after the chosen one
SETTLE_MS = 400  # a selection must rest this long before it is explained unasked (scrubbing
# through fifty steps would otherwise queue fifty passes on the worker)
STALE_OPACITY = 0.3  # the plots of a step other than the selected one, while it computes
AUTO_TOKENS = 1024  # past this context a step is explained only when asked: the pass costs
# seconds and its memory grows with the context (2.3 GB at 4,096 tokens; docs/performance.md)


def diverging(value: float, scale: float) -> QColor:
    """Red for positive, blue for negative, white for zero (light fills that take black text)."""
    t = max(-1.0, min(1.0, value / scale)) if scale > 0 else 0.0
    hue = 0.0 if t >= 0 else 0.6
    return QColor.fromHsvF(hue, 0.75 * abs(t), 1.0)


def split_text(lg: Any) -> str:
    """How the logit splits, and what is held fixed to make it split (said in the view).

    Only the terms the model has are named: its biases, its final soft-cap (Gemma), which do
    not split over the pieces. What is left on a model with neither is float32 rounding."""
    if getattr(lg, "unsplit", ""):
        return f"the whole logit (not split: {lg.unsplit})"
    capped = bool(getattr(lg, "has_softcap", abs(getattr(lg, "after_unembed", 0.0)) > 0))
    rest = lg.residual - lg.after_unembed if capped else lg.residual
    text = f"embedding + heads + MLPs ({lg.sum:.3f})"
    if getattr(lg, "has_biases", True):
        text += f" + biases ({rest:.1e})"
    else:
        text += f" (float32 rounding leaves {rest:.1e})"
    if capped:
        text += f" + the final soft-cap ({lg.after_unembed:+.3f}, does not split)"
    held = f"The final norm's scale is held at its value for this step ({lg.norm_scale:.4g})"
    if getattr(lg, "post_norm", False):
        held += ", and so is each block's post-attention norm, position by position"
    return f"{text}. {held}"


class _HeadImage(pg.ImageItem):
    """The layer × head heatmap. Signals: sig_clicked(float, float): image row, column."""

    sig_clicked = Signal(float, float)

    def __init__(self) -> None:
        super().__init__(axisOrder="row-major")

    def mouseClickEvent(self, ev: Any) -> None:  # noqa: N802 (Qt override)
        pos = ev.pos()
        self.sig_clicked.emit(pos.y(), pos.x())


class AttributionPane(Pane):
    """Logit split (bars per layer, heatmap per head), input tokens coloured by gradient ×
    input, and the flow graph pruned by a movable threshold."""

    title = "Why this token?"
    capability = "residual"  # a served run has none: the note says so (Pane.missing_line)
    empty_text = (
        "Why the chosen token won: its logit split over layers and heads. Run a prompt "
        "(Ctrl+Enter) to see it."
    )

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.result: Any = None
        self.wanted = -1  # a step the user asked to explain (computes even during a run)
        self.vs_ids: list[int | None] = [None]
        self.settled: tuple[int, int | None] | None = None  # (step, vs) that has rested
        self._settle = QTimer(self, singleShot=True, interval=SETTLE_MS)
        self._settle.timeout.connect(self._on_settled)
        self._build_controls()
        self._build_tabs()
        controller.sig_explain_requested.connect(self.explain_step)

    # ----------------------------------------------------------------- construction
    def _build_controls(self) -> None:
        self.header = QLabel(wordWrap=True)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.vs_box = QComboBox()
        self.vs_box.setToolTip("Explain the logit difference with another token of this step")
        self.vs_box.setMinimumContentsLength(16)
        self.vs_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.vs_box.currentIndexChanged.connect(self.schedule)
        self.explain_button = QPushButton("Explain")
        self.explain_button.clicked.connect(lambda: self.explain_step(self.controller.selected))
        self.threshold = QSlider(Qt.Orientation.Horizontal, minimum=1, maximum=50, value=4)
        self.threshold.setToolTip("Flow graph: keep routes whose every edge is at least this")
        self.threshold_label = QLabel()
        self.threshold.valueChanged.connect(self._draw_graph)
        row = QHBoxLayout()
        for w in (QLabel("vs"), self.vs_box, self.explain_button, QLabel("threshold")):
            row.addWidget(w)
        row.addWidget(self.threshold, 1)
        row.addWidget(self.threshold_label)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(2, 2, 2, 2)
        self._layout.addLayout(row)
        self._layout.addWidget(self.header)

    def _build_tabs(self) -> None:
        self.tabs = QTabWidget()
        self._layout.addWidget(self.tabs, 1)
        self._fade = QGraphicsOpacityEffect(opacity=STALE_OPACITY, enabled=False)
        self.tabs.setGraphicsEffect(self._fade)
        self.stale = False  # the plots show another step's explanation than the selected one
        self.logit_view = pg.GraphicsLayoutWidget()
        self.bars_plot = self.logit_view.addPlot(row=0, col=0)
        self.bars_plot.setLabel("bottom", "layer (−1: embedding)")
        self.bars_plot.setLabel("left", "logit contribution")
        self.bars_plot.addLegend(offset=(5, 5))
        self.attn_bars = pg.BarGraphItem(x=[], height=[], width=0.4, brush=(66, 133, 244),
                                         name="attention")  # fmt: skip
        self.mlp_bars = pg.BarGraphItem(x=[], height=[], width=0.4, brush=(244, 160, 0),
                                        name="MLP")  # fmt: skip
        self.embed_bar = pg.BarGraphItem(x=[], height=[], width=0.8, brush=(150, 150, 150))
        for item in (self.attn_bars, self.mlp_bars, self.embed_bar):
            self.bars_plot.addItem(item)
        self.heads_plot = self.logit_view.addPlot(row=0, col=1)
        self.heads_plot.setLabel("left", "layer")
        self.heads_plot.setLabel("bottom", "head")
        self.heads_plot.setMenuEnabled(False)
        self.heads_plot.invertY(True)
        self.heads_plot.setMouseEnabled(False, False)
        self.heads = _HeadImage()
        self.heads.setColorMap(pg.colormap.get("CET-D1"))
        self.heads.sig_clicked.connect(self.head_clicked)
        self.heads_plot.addItem(self.heads)
        steady_axes(self.bars_plot, self.heads_plot)
        self.logit_view.ci.layout.setColumnStretchFactor(0, 3)
        self.logit_view.ci.layout.setColumnStretchFactor(1, 2)
        self.tabs.addTab(self.logit_view, "Logit attribution")
        self.chips = ChipView()
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(self.chips)
        self.inputs_note = QLabel(wordWrap=True)
        box = QWidget()
        col = QVBoxLayout(box)
        col.addWidget(self.inputs_note)
        col.addWidget(scroll, 1)
        self.tabs.addTab(box, "Input tokens")
        self.flow_widget = pg.GraphicsLayoutWidget()
        self.flow = FlowView(self.flow_widget.addPlot())
        self.flow.sig_edge_clicked.connect(self.edge_clicked)
        self.tabs.addTab(self.flow_widget, "Flow graph")

    # ----------------------------------------------------------------- requests
    def explain_step(self, index: int) -> None:
        """Compute the explanation of step ``index`` now, even while a run streams."""
        self.wanted = index
        self.schedule()

    def _on_settled(self) -> None:
        step = self.controller.current_step()
        if step is not None:
            self.settled = (step.index, self._vs())
            self.schedule()

    def _vs(self) -> int | None:
        i = self.vs_box.currentIndex()
        return self.vs_ids[i] if 0 <= i < len(self.vs_ids) else None

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        self.schedule()

    def on_result(self, kind: str, key: object, result: object) -> None:
        if kind == "explain":
            self.schedule()

    # ----------------------------------------------------------------- rendering
    def render(self, step: Any) -> None:
        ctl = self.controller
        if step is None:
            self.clear()
            return
        self._sync_vs(step)
        asked = self.wanted == step.index
        long = step.position + 1 > AUTO_TOKENS
        if not asked and (ctl.busy or not self.isVisible() or long):
            cost = (
                f"over {step.position + 1:,} tokens of context: seconds, and memory that grows "
                "with it"
                if long
                else "on the worker"
            )
            self._waiting(
                f"step {step.index} chose {step.token.text!r}: press Explain, or right-click a "
                f"token → Why this token? (one forward + backward pass {cost})"
            )
            return
        if not asked and self.settled != (step.index, self._vs()):
            self._settle.start()  # (re)start: explain once the selection rests
            self._waiting(f"step {step.index}: explaining when the selection rests…")
            return
        x = ctl.request_analysis("explain", step=step.index, vs=self._vs())
        if x is None:
            self._waiting(ctl.waiting_text("explanation", f"explaining step {step.index}…"))
            return
        self._set_stale(False)
        if x is not self.result:
            self.result = x
            self._draw(x)

    def _waiting(self, text: str) -> None:
        """The header says what is coming; plots of another step still up are faded and
        named, never shown as this step's (they stayed up unmarked while a step computed)."""
        old = self.result
        self._set_stale(old is not None)
        if old is not None:
            vs = f" vs {old.vs_text!r}" if old.vs_text else ""
            text += f" · faded below: step {old.step}'s explanation{vs}, until this one is ready"
        self.header.setText(text)

    def _set_stale(self, stale: bool) -> None:
        self.stale = stale
        self._fade.setEnabled(stale)  # off: no offscreen pass over the plots at each paint

    def _sync_vs(self, step: Any) -> None:
        ids = [None] + [int(i) for i in step.top_ids[: VS_CHOICES + 1] if i != step.token.id]
        if ids[: VS_CHOICES + 1] == self.vs_ids:
            return
        texts = ["(the logit itself)"] + [repr(step.top_texts[list(step.top_ids).index(i)])
                                          for i in ids[1:]]  # fmt: skip
        with QSignalBlocker(self.vs_box):
            self.vs_box.clear()
            self.vs_box.addItems(texts[: VS_CHOICES + 1])
        self.vs_ids = ids[: VS_CHOICES + 1]

    def _draw(self, x: Any) -> None:
        lg = x.logits
        what = f"logit({x.token_text!r})" + (f" − logit({x.vs_text!r})" if x.vs_text else "")
        ms = sum(v for _k, v in x.timings_ms)
        self.header.setText(
            f"step {x.step}: {what} = {lg.logit:.3f} = {split_text(lg)} · {ms:.0f} ms"
        )
        layers = np.arange(len(lg.mlp))
        self.attn_bars.setOpts(x=layers - 0.2, height=lg.attn)
        self.mlp_bars.setOpts(x=layers + 0.2, height=lg.mlp)
        self.embed_bar.setOpts(x=[-1], height=[lg.embed])
        span = float(np.abs(lg.heads).max()) or 1.0
        self.heads.setImage(np.asarray(lg.heads), levels=(-span, span))
        self._draw_inputs(x.inputs)
        self._draw_graph()

    def _draw_inputs(self, inputs: Any) -> None:
        scale = float(np.abs(inputs.values).max()) or 1.0
        chips = [
            Chip(piece_label(t, t.encode()), int(i), (f"token {n}", repr(t),
                 f"{inputs.method}: {v:+.4f}"), fill=diverging(float(v), scale))
            for n, (i, t, v) in enumerate(zip(inputs.token_ids, inputs.texts, inputs.values,
                                              strict=True))
        ]  # fmt: skip
        self.chips.set_chips(chips)
        self.inputs_note.setText(
            f"Method: {inputs.method}; log p = {inputs.logprob:.3f}. Red raised it, blue "
            f"lowered it (scale ±{scale:.3g})."
        )

    def _draw_graph(self, *_: object) -> None:
        value = self.threshold.value() / 100
        self.threshold_label.setText(f"{value:.2f}")
        if self.result is None:
            return
        drawn = self.flow.show(self.result.graph, max(value, self.result.graph.floor))
        self.tabs.setTabText(2, f"Flow graph ({drawn} edges)")

    # ----------------------------------------------------------------- links
    def head_clicked(self, row: float, col: float) -> None:
        layer, head = int(row), int(col)
        if self.result is not None and 0 <= layer < self.result.logits.heads.shape[0]:
            if 0 <= head < self.result.logits.heads.shape[1]:
                self.controller.request_head(layer, head)

    def context_targets(self) -> list[ContextTarget]:
        """A head of the heads heatmap: turn it off, scale it (What if?)."""
        return [ContextTarget(self.heads_plot, lambda x, y: self.head_changes(y, x))]

    def head_changes(self, row: float, col: float) -> list[Any]:
        heads = None if self.result is None else self.result.logits.heads
        layer, head = int(np.floor(row)), int(np.floor(col))
        if heads is None or not (0 <= layer < heads.shape[0] and 0 <= head < heads.shape[1]):
            return []
        return head_changes(layer, head, self.controller.model_info or self.controller.info)

    def edge_clicked(self, edge: int) -> None:
        """An edge of the graph: its layer (and dominant head) to the Attention pane, its
        source token marked in the input chips."""
        g = self.result.graph
        kind = ("attention", "residual", "MLP")[int(g.kind[edge])]
        layer, src, dst = int(g.src_level[edge]) // 2, int(g.src_pos[edge]), int(g.dst_pos[edge])
        text = f"{kind} edge, layer {layer}: token {src} {g.tokens[src]!r} → {dst}"
        if int(g.kind[edge]) == 0:
            head = int(g.head_shares[edge].argmax())
            text += f", mostly head {head} ({g.head_shares[edge][head]:.0%})"
            self.controller.request_head(layer, head)
        self.chips.set_selection(src, dst)
        self.header.setText(f"{text}; weight {g.weight[edge]:.3f}")

    def clear(self) -> None:
        self.result, self.wanted, self.settled = None, -1, None
        self._set_stale(False)
        self._settle.stop()
        self.header.setText("")
        for bars in (self.attn_bars, self.mlp_bars, self.embed_bar):
            bars.setOpts(x=[], height=[])
        self.heads.clear()
        self.chips.set_chips([])
        self.flow.clear()

    # ----------------------------------------------------------------- its story
    def explainer(self) -> ex.Explainer | None:
        """The card of the shown explanation; none while it is another step's (faded)."""
        return None if self.stale else ex.attribution_card(self.result)

    # ----------------------------------------------------------------- export
    def plot_items(self) -> list[Any]:
        return [self.bars_plot, self.heads_plot]

    def csv_table(self) -> tuple[Sequence[str], Sequence[Sequence[Any]]]:
        header = ("kind", "layer", "head", "value")
        if self.result is None:
            return header, []
        lg = self.result.logits
        rows: list[list[Any]] = [["embed", "", "", lg.embed]]
        for layer in range(len(lg.mlp)):
            rows.append(["attn", layer, "", float(lg.attn[layer])])
            rows += [["head", layer, h, float(v)] for h, v in enumerate(lg.heads[layer])]
            rows.append(["mlp", layer, "", float(lg.mlp[layer])])
        rows.append(["residual", "", "", lg.residual])
        return header, rows
