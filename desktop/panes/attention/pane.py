"""Attention pane: one head's causal map over prompt and response, and a grid of every head.

The prompt part of the map is recomputed on the worker (``attention_map``); each decode step
adds the row its query wrote into the records, so selecting step i shows the map as it stood
after i new tokens. Long contexts are max-pooled so the image never exceeds ~1024 × 1024.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from llm_lens.core import cards as ex
from llm_lens.desktop.panes.attention.axes import (
    LONG_PROMPT,
    contrast_levels,
    frame_view,
    token_ticks,
)
from llm_lens.desktop.panes.attention.cells import (
    TILE,
    SelectionMarks,
    TileImage,
    cell_text,
    map_position_at,
    strip,
    tile_cell,
    tile_text,
)
from llm_lens.desktop.panes.attention.header import (
    gqa_note,
    has_rows,
    map_note,
    next_run_line,
    no_attention_note,
    rows_note,
)
from llm_lens.desktop.panes.attention.image import assemble_map
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.selection import context_tokens
from llm_lens.desktop.state.whatif import head_change, head_changes
from llm_lens.desktop.widgets.common import ATTENTION_MAP_SIZE
from llm_lens.desktop.widgets.pane import ContextTarget, HoverTarget, Pane, plain_axis, steady_axes

MAP_SIZE = ATTENTION_MAP_SIZE
OVERVIEW_TOKENS = 2048  # longer prompts: the overview shows each head's recorded last row (every
# head's whole map is layers × heads × T² scores: minutes of the worker at 8,192 tokens)


class AttentionPane(Pane):
    """Heatmap of the selected layer/head (queries × keys) and a clickable grid of all heads."""

    title = "Attention"
    capability = "attention"  # a served run has none: the note says so (Pane.missing_line)
    empty_text = (
        "Which earlier tokens each token reads, per layer and head. Run a prompt "
        "(Ctrl+Enter) to see it."
    )
    card_follows_token = True

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.matrix = np.zeros((0, 0), np.float32)  # the shown map (content, no padding)
        self.positions = np.zeros(0, np.int64)  # first position of each matrix cell
        self.texts: list[str] = []  # token text at the first position of each cell
        self.labels: list[str] = []  # axis label of each cell (visible whitespace), unthinned
        self.block = 1
        self._grid_shape: tuple[int, int] = (0, 0)
        self._view_size = 0
        self._contrast_prompt: Any = None  # the prompt whose length last set the contrast
        self._build_controls()
        self._build_plots()
        controller.sig_head_requested.connect(self.show_head)

    # ----------------------------------------------------------------- construction
    def _build_controls(self) -> None:
        self.layer_box, self.head_box = QSpinBox(), QSpinBox()
        self.contrast = QCheckBox("contrast")
        self.contrast.setToolTip("Stretch the colour scale to the 98th percentile of the map")
        self.header = QLabel()
        self.header.setWordWrap(True)
        row = QHBoxLayout()
        for text, widget in (("Layer", self.layer_box), ("Head", self.head_box)):
            row.addWidget(QLabel(text))
            row.addWidget(widget)
        row.addWidget(self.contrast)
        row.addStretch(1)
        for w in (self.layer_box, self.head_box):
            w.valueChanged.connect(self.schedule)
        self.contrast.toggled.connect(self.schedule)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(2, 2, 2, 2)
        self._layout.addLayout(row)
        self._layout.addWidget(self.header)

    def _build_plots(self) -> None:
        self.graphics = pg.GraphicsLayoutWidget()
        self._layout.addWidget(self.graphics, 1)
        self.map_plot = self.graphics.addPlot(row=0, col=0)
        self.map_plot.setLabel("left", "query")
        self.map_plot.setLabel("bottom", "key")
        for side in ("left", "bottom"):  # token positions: never "(x0.001)" on an empty map
            plain_axis(self.map_plot.getAxis(side))
        self.map_plot.invertY(True)
        self.map_plot.setMenuEnabled(False)
        self.image = pg.ImageItem(axisOrder="row-major", nanPolicy="omit")
        self.map_plot.addItem(self.image)
        vb = self.map_plot.getViewBox()
        vb.sigRangeChanged.connect(self._relabel)  # zoomed: labels for the cells on screen
        vb.sigResized.connect(self._relabel)
        self.bar = pg.ColorBarItem(values=(0, 1), colorMap="viridis", interactive=False, width=12)
        self.bar.setImageItem(self.image, insert_in=self.map_plot)
        self.grid_plot = self.graphics.addPlot(row=0, col=1)
        self.grid_plot.invertY(True)
        self.grid_plot.setMenuEnabled(False)
        self.grid_plot.setMouseEnabled(False, False)
        self.grid_plot.setLabel("left", "layer")
        self.grid_plot.setLabel("bottom", "head")
        self.tiles = TileImage()
        self.tiles.sig_clicked.connect(self.tile_clicked)
        self.tiles.setColorMap(pg.colormap.get("viridis"))
        self.grid_plot.addItem(self.tiles)
        self.layer_lines = pg.PlotDataItem(connect="pairs", pen=pg.mkPen(60, 60, 60))
        self.group_lines = pg.PlotDataItem(connect="pairs", pen=pg.mkPen("w", width=2))
        self.cursor = pg.PlotDataItem(pen=pg.mkPen("r", width=2))
        for item in (self.layer_lines, self.group_lines, self.cursor):
            self.grid_plot.addItem(item)
        steady_axes(self.map_plot, self.grid_plot)
        for plot in (self.map_plot, self.grid_plot):  # no numbers before there is a model
            plot.setRange(xRange=(0, 1), yRange=(0, 1), padding=0)
            for side in ("left", "bottom"):
                plot.getAxis(side).setTicks([[]])
        self.graphics.ci.layout.setColumnStretchFactor(0, 3)
        self.graphics.ci.layout.setColumnStretchFactor(1, 1)
        self.grid_plot.setMinimumWidth(150)  # nine heads stay clickable in a narrow pane

    # ----------------------------------------------------------------- interaction
    def show_head(self, layer: int, head: int) -> None:
        """Show this layer and head (asked by another pane)."""
        self.layer_box.setValue(layer)
        self.head_box.setValue(head)

    def tile_clicked(self, y: float, x: float) -> None:
        """Select the layer/head of the overview tile at image pixel (y, x)."""
        layer, head = int(y // TILE), int(x // TILE)
        if 0 <= layer <= self.layer_box.maximum() and 0 <= head <= self.head_box.maximum():
            self.layer_box.setValue(layer)
            self.head_box.setValue(head)

    def on_result(self, kind: str, key: object, result: object) -> None:
        if kind in ("attention_map", "attention_overview"):
            self.schedule()

    # ----------------------------------------------------------------- render
    def missing_line(self) -> str | None:
        """The engine's line where the shown run has no maps; with NDIF (rows of opened heads)
        none for a head the run brought back, else the head is opened for the next run."""
        line = super().missing_line()
        ctl = self.controller
        capabilities = getattr(ctl, "capabilities", None)
        if line is None or ctl.info is None or capabilities is None:
            return line
        self._sync_model(ctl.info)
        layer, head = self.layer_box.value(), self.head_box.value()
        if not ctl.info.has_attention(layer):  # a Mamba or DeltaNet layer: no rows to send
            return no_attention_note(ctl.info.layer_kinds[layer])
        if capabilities.head_rows():
            capabilities.open_head(layer, head)
        if ctl.current_step() is not None and has_rows(ctl.steps, layer, head):
            return None
        return next_run_line(layer, head, line) if capabilities.head_rows() else line

    def rows_only(self) -> bool:
        """True when the shown run's engine brought back rows of opened heads, not maps."""
        return super().missing_line() is not None

    def render(self, step: Any) -> None:
        ctl = self.controller
        if ctl.info is None or ctl.prompt is None or step is None:
            return
        self._sync_model(ctl.info)
        self._contrast_for(ctl.prompt)
        layer, head = self.layer_box.value(), self.head_box.value()
        rows, ask = self.rows_only(), {"layer": layer, "head": head, "max_size": MAP_SIZE}
        if head >= ctl.info.heads_in(layer):  # not a head of this layer (Inkling's differ)
            self.matrix = np.zeros((0, 0), np.float32)
            self.image.clear()
            amap, rows = None, False
        else:
            amap = None if rows else ctl.request_analysis("attention_map", **ask)
        if amap is not None or rows:
            image, size = self._assemble(amap, step, layer, head)
            levels = self._levels()
            self.image.setImage(image, levels=levels)
            self.bar.setLevels(levels)
            self._fit_view(len(self.positions))
            self._apply_ticks()
        self._header(step, layer, head, amap, rows)
        self._render_overview(step, rows)

    def _contrast_for(self, prompt: Any) -> None:
        """Contrast on, once, for each new prompt over ``LONG_PROMPT`` tokens: a query spread
        over hundreds of keys has weights of a few thousandths, black on a 0..1 scale. The box
        shows it; unchecked again, it stays off for that prompt."""
        if prompt is self._contrast_prompt:
            return
        self._contrast_prompt = prompt
        if len(prompt) > LONG_PROMPT and not self.contrast.isChecked():
            with QSignalBlocker(self.contrast):
                self.contrast.setChecked(True)

    def _sync_model(self, info: Any) -> None:
        """Spin-box ranges and the overview's separators follow the loaded model."""
        shape = (info.num_layers, info.num_heads)
        if shape == self._grid_shape:
            return
        self._grid_shape = shape
        for box, top in ((self.layer_box, shape[0] - 1), (self.head_box, shape[1] - 1)):
            with QSignalBlocker(box):
                box.setRange(0, top)
        w, h = shape[1] * TILE, shape[0] * TILE
        ys = np.repeat(np.arange(1, shape[0]) * TILE, 2).astype(float)
        xs = np.tile([0.0, w], shape[0] - 1)
        self.layer_lines.setData(xs, ys)
        bounds = [g[0] * TILE for g in info.gqa_groups[1:]]
        self.group_lines.setData(np.repeat(bounds, 2).astype(float), np.tile([0.0, h], len(bounds)))
        self.grid_plot.setRange(xRange=(0, w), yRange=(0, h), padding=0)
        heads = [(i * TILE + TILE / 2, str(i)) for i in range(shape[1])]
        layers = [(i * TILE + TILE / 2, str(i)) for i in range(0, shape[0], 5)]
        self.grid_plot.getAxis("bottom").setTicks([heads])
        self.grid_plot.getAxis("left").setTicks([layers])

    def _assemble(self, amap: Any, step: Any, layer: int, head: int) -> tuple[np.ndarray, int]:
        """The padded image and its content size; sets ``matrix``, ``positions``, ``labels``."""
        shown = assemble_map(self.controller, amap, step, layer, head)
        self.block, self.matrix, self.positions = shown.block, shown.matrix, shown.positions
        self.texts, self.labels = shown.texts, shown.labels
        return shown.image, shown.size

    def _fit_view(self, content: int) -> None:
        if content != self._view_size and content > 0:
            self._view_size = content
            frame_view(self.map_plot, content)

    def _levels(self) -> tuple[float, float]:
        """0..1, or stretched to the 98th percentile of the causal cells (beyond key 0)."""
        return contrast_levels(self.matrix) if self.contrast.isChecked() else (0.0, 1.0)

    def _apply_ticks(self) -> None:
        token_ticks(self.map_plot, self.labels)

    def _relabel(self, *_: object) -> None:
        if self.labels:
            self._apply_ticks()

    def _render_overview(self, step: Any, rows_only: bool = False) -> None:
        """Every layer × head as one tiled image: prompt maps at the prefill (of prompts up to
        ``OVERVIEW_TOKENS``), the recorded rows otherwise (and where only rows came back)."""
        layers, heads = self._grid_shape
        prefill = step.index == 0 and len(self.controller.prompt or ()) <= OVERVIEW_TOKENS
        if prefill and not rows_only:
            thumbs = self.controller.request_analysis("attention_overview")
            if thumbs is None:
                return
            thumbs = np.asarray(thumbs)[:, :, :TILE, :TILE]
        else:
            rows = strip(np.asarray(step.attention), TILE)  # (layers, heads, TILE)
            thumbs = np.broadcast_to(rows[:, :, None, :], (layers, heads, TILE, TILE))
        grid = thumbs.transpose(0, 2, 1, 3).reshape(layers * TILE, heads * TILE)
        self.tiles.setImage(grid, levels=self._levels())
        self._mark_tile()

    def _mark_tile(self) -> None:
        x0, y0 = self.head_box.value() * TILE, self.layer_box.value() * TILE
        x1, y1 = x0 + TILE, y0 + TILE
        self.cursor.setData([x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0])

    def _header(self, step: Any, layer: int, head: int, amap: Any, rows: bool = False) -> None:
        info = self.controller.info
        shares = gqa_note(info, head, layer)  # "" for a head the layer has not
        parts = [f"layer {layer}, head {head}" + (f": {shares}" if shares else "")]
        changed = head_change(self.controller.interventions, layer, head)
        parts[:0] = [changed] if changed else []
        if step.index > 0:
            parts.append(f"step {step.index}: {step.index} response rows over the prompt")
        windows = getattr(step.kv, "windows", None) or ()
        if layer < len(windows) and windows[layer]:
            parts.append(f"sliding window: each query sees its last {windows[layer]} positions")
        waiting = self.controller.waiting_text("prompt map", "computing the prompt map…")
        if rows:  # no map is coming: what the rows are
            waiting = rows_note(self.controller.capabilities.head_rows())
        note = map_note(info, layer, amap, self.block, waiting, head)
        if note:
            parts.append(note)
        if self.contrast.isChecked() and amap is not None:
            top = self._levels()[1]
            parts.append(f"contrast: colours stretched to 0–{top:.3g} (98th percentile)")
        if step.index == 0 and len(self.controller.prompt or ()) > OVERVIEW_TOKENS:
            parts.append(
                f"overview: each head's last row (whole maps for prompts up to {OVERVIEW_TOKENS:,}"
                " tokens)"
            )
        self.header.setText(" · ".join(parts))

    # ----------------------------------------------------------------- its story
    def install_marks(self) -> bool:
        """Boxes round the selected token's row and column on the map, lines through it in
        every tile; a click on the map selects a token."""
        self._marks = SelectionMarks(self.map_plot, self.grid_plot)
        self.map_plot.scene().sigMouseClicked.connect(self._map_clicked)
        return True

    def _map_clicked(self, ev: Any) -> None:
        position = self.map_cell_at(ev.scenePos())
        if position is not None:
            self.controller.request_select_token(position)

    def map_cell_at(self, scene_pos: Any) -> int | None:
        """The token position a click at ``scene_pos`` on the map selects."""
        return map_position_at(self.map_plot, self.positions, scene_pos)

    def mark_token(self, position: int) -> None:
        ctl = self.controller
        n_prompt = len(ctl.prompt) if ctl.prompt is not None else 0
        cell, row = tile_cell(ctl.current_step(), n_prompt, position)
        self.linked = {
            **self._marks.show(self.matrix, self.block, position),
            **self._marks.show_tiles(self._grid_shape, cell, row),
        }

    def cell_text(self, x: float, y: float) -> str:
        """'query 12 'bank' → key 3 'the': weight 0.412 · layer 3, head 5'."""
        text = cell_text(self.matrix, self.positions, self.texts, self.block, x, y)
        if not text:
            return ""
        return f"{text} · layer {self.layer_box.value()}, head {self.head_box.value()}"

    def tile_text(self, x: float, y: float) -> str:
        """'layer 3, head 5: largest weight in the thumbnail 0.91 · click to show this head'."""
        return tile_text(self._grid_shape, self.tiles.image, x, y)

    def hover_targets(self) -> list[HoverTarget]:
        return [
            HoverTarget(self.map_plot, self.cell_text),
            HoverTarget(self.grid_plot, self.tile_text),
        ]

    def context_targets(self) -> list[ContextTarget]:
        """A head of the grid (or the head shown in the map): turn it off, scale it."""
        return [
            ContextTarget(self.grid_plot, self.head_changes),
            ContextTarget(self.map_plot, lambda _x, _y: self.head_changes(
                (self.head_box.value() + 0.5) * TILE, (self.layer_box.value() + 0.5) * TILE)),
        ]  # fmt: skip

    def head_changes(self, x: float, y: float) -> list[Any]:
        """What-if changes of the grid's head at (x, y) (pixels of the grid image); none on a
        layer that computes no attention (a hybrid's Mamba, DeltaNet or convolution layer)."""
        layer, head = int(y // TILE), int(x // TILE)
        rows, cols = self._grid_shape
        if not (0 <= layer < rows and 0 <= head < cols):
            return []
        return head_changes(layer, head, self.controller.model_info or self.controller.info)

    def explainer(self) -> ex.Explainer | None:
        if self.matrix.size == 0 or np.isnan(self.matrix).any():  # rows only: no head pattern
            return None
        ctl, tokens = self.controller, context_tokens(self.controller)
        pos = ctl.token if ctl.token >= 0 else len(self.positions) * self.block - 1
        return ex.attention_card(
            self.layer_box.value(),
            self.head_box.value(),
            self.matrix,
            self.block,
            [t.text for t in tokens],
            min(pos, len(tokens) - 1),
        )

    # ----------------------------------------------------------------- clear / export
    def clear(self) -> None:
        self.matrix = np.zeros((0, 0), np.float32)
        self.positions = np.zeros(0, np.int64)
        self.texts, self.labels = [], []
        self._view_size = 0
        self.image.clear()
        self.tiles.clear()
        self.header.setText("")
        for axis in ("left", "bottom"):
            self.map_plot.getAxis(axis).setTicks([[]])

    def plot_items(self) -> list[Any]:
        return [self.map_plot]

    def csv_table(self) -> tuple[Sequence[str], Sequence[Sequence[Any]]]:
        header = ("query position", "query token", "key position", "key token", "weight")
        rows = []
        full = self.texts
        for q, qpos in enumerate(self.positions):
            for k in range(q + 1):
                weight = float(self.matrix[q, k])
                if weight != weight:  # a row not brought back (NaN)
                    break
                rows.append((int(qpos), full[q], int(self.positions[k]), full[k], weight))
        return header, rows
