"""Positions pane: how the loaded model tells positions apart, read from the model itself.

RoPE models: the angle of each rotated dimension pair at each prompt position, the rotation
frequencies and the q·k-vs-distance decay, from the model's own rotary module (scaling, partial
rotary and per-layer-type settings included). Learned tables (GPT-2, OPT): the vectors added for
each position and their cosine similarity. ALiBi: the slope of each head's distance penalty.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QComboBox, QLabel, QStackedWidget, QVBoxLayout, QWidget

from llm_lens.core import cards as ex
from llm_lens.core.positions import ALIBI, LEARNED, ROPE, PositionView, RopeSet
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.selection import context_tokens, selected_token
from llm_lens.desktop.state.whatif import forgotten
from llm_lens.desktop.widgets.marks import MARK_PEN, rect_xy
from llm_lens.desktop.widgets.pane import HoverTarget, Pane
from llm_lens.desktop.widgets.token_text import visible_text
from llm_lens.desktop.widgets.whatif_mark import WhatIfMark

EMPTY_POSITIONS = 64  # positions drawn before any prompt exists
ALIBI_DISTANCE = 64  # distances drawn in the ALiBi bias curves
NONE_NOTE = "This model adds no position information to its tokens (no RoPE, table or ALiBi)."


def _image_plot(layout: pg.GraphicsLayoutWidget, title: str, col: int, **kw: Any) -> Any:
    plot = layout.addPlot(row=0, col=col, title=title, **kw)
    plot.invertY(True)
    plot.setMenuEnabled(False)
    image = pg.ImageItem(axisOrder="row-major")
    plot.addItem(image)
    return plot, image


class PositionsPane(Pane):
    """RoPE angles and frequencies, a learned table and its similarity, or ALiBi slopes."""

    title = "Positions"
    capability = "residual"  # a served run has none: the note says so (Pane.missing_line)
    empty_text = (
        "How the model tells positions apart (RoPE turns, or a learned table). Run a "
        "prompt (Ctrl+Enter) to see it."
    )
    card_follows_token = True

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.view: PositionView | None = None
        self.rope: RopeSet | None = None  # the rotary set drawn
        self._key: tuple[Any, ...] | None = None
        self._prompt: Any = None
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.rope_choice = QComboBox()
        self.rope_choice.setToolTip("layers with their own rotary settings (e.g. local / global)")
        self.rope_choice.currentIndexChanged.connect(self._rope_chosen)
        self.stack = QStackedWidget()
        self.rope_view = self._build_rope()
        self.learned_view = self._build_learned()
        self.alibi_view = self._build_alibi()
        for widget in (self.rope_view, self.learned_view, self.alibi_view):
            self.stack.addWidget(widget)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        self.whatif_mark = WhatIfMark()
        layout.addWidget(self.whatif_mark)
        layout.addWidget(self.summary)
        layout.addWidget(self.rope_choice)
        layout.addWidget(self.stack, 1)
        self._show_note("")

    def _build_rope(self) -> pg.GraphicsLayoutWidget:
        g = pg.GraphicsLayoutWidget()
        self.angle_plot = g.addPlot(row=0, col=0, rowspan=2, title="angle mod 2π")
        self.angle_plot.invertY(True)
        self.angle_plot.setLabel("bottom", "rotated dimension pair")
        self.angle_plot.setMenuEnabled(False)
        self.angles = pg.ImageItem(axisOrder="row-major")
        self.angle_plot.addItem(self.angles)
        self.struck = pg.PlotDataItem(pen=pg.mkPen("#d93025", width=3), connect="pairs")
        self.angle_plot.addItem(self.struck, ignoreBounds=True)  # What if? forgotten rows
        bar = pg.ColorBarItem(
            values=(0, 2 * math.pi), colorMap="CET-C1", interactive=False, width=10
        )
        bar.setImageItem(self.angles, insert_in=self.angle_plot)
        self.freq_plot = g.addPlot(row=0, col=1, title="rotation frequency (rad / token)")
        self.freq_plot.setLogMode(False, True)
        self.freq_plot.setLabel("bottom", "rotated dimension pair")
        self.freq_curve = self.freq_plot.plot(pen=None, symbol="o", symbolSize=4)
        self.score_plot = g.addPlot(row=1, col=1, title="q·k of equal vectors vs distance")
        self.score_plot.setLabel("bottom", "distance (tokens)")
        self.score_curve = self.score_plot.plot(pen=pg.mkPen("y", width=1.5))
        g.ci.layout.setColumnStretchFactor(0, 1)
        g.ci.layout.setColumnStretchFactor(1, 1)
        return g

    def _build_learned(self) -> pg.GraphicsLayoutWidget:
        g = pg.GraphicsLayoutWidget()
        self.table_plot, self.table_image = _image_plot(g, "learned position vectors", 0)
        self.table_plot.setLabel("bottom", "hidden dimension")
        self.similarity_plot, self.similarity = _image_plot(g, "cosine similarity", 1)
        self.similarity_plot.setLabel("bottom", "position")
        self.similarity_plot.setAspectLocked(True)
        bar = pg.ColorBarItem(values=(-1, 1), colorMap="CET-D1", interactive=False, width=10)
        bar.setImageItem(self.similarity, insert_in=self.similarity_plot)
        return g

    def _build_alibi(self) -> pg.GraphicsLayoutWidget:
        g = pg.GraphicsLayoutWidget()
        self.slope_plot = g.addPlot(row=0, col=0, title="ALiBi slope per head")
        self.slope_plot.setLabel("bottom", "head")
        self.slope_bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush="#4fc3f7", pen=None)
        self.slope_plot.addItem(self.slope_bars)
        self.bias_plot = g.addPlot(row=0, col=1, title="score bias vs distance, per head")
        self.bias_plot.setLabel("bottom", "distance (tokens)")
        self.bias_curves: list[Any] = []
        return g

    # ----------------------------------------------------------------- render
    def render(self, step: Any) -> None:
        """Ask the worker for the model's position scheme once per model and prompt."""
        ctl = self.controller
        info = ctl.info
        if info is None:
            return
        if step is None and self.missing_line() is not None:  # NDIF, a server: none comes
            self._key = None  # the engine's line says why, no stale "reading…" above it
            self._show_note("")
            return
        prompt = ctl.prompt
        n = len(prompt) if prompt is not None else EMPTY_POSITIONS
        key = (info.weights_id, n, None if prompt is None else tuple(prompt.ids))
        if key == self._key:
            self.mark_forgotten()
            return
        view = ctl.request_analysis("positions", positions=n)
        if view is None:
            self._show_note(ctl.waiting_text("position view", "reading the model's positions…"))
            return
        self._key = key
        self.show_view(view, prompt)
        self.mark_forgotten()

    def mark_forgotten(self) -> None:
        """What if? A red line through each forgotten token's row of angles, and the mark's
        line: no intervention changes how positions are encoded; a forgotten token keeps its
        rotation, but no later query reads its key."""
        hidden = forgotten(self.controller.interventions)
        rope = self._shown_rope()
        rows = [p for p in hidden if rope is not None and p < rope.angles.shape[0]]
        width = rope.angles.shape[1] if rope is not None else 0
        xs = [x for _ in rows for x in (0, width)]
        self.struck.setData(xs, [p + 0.5 for p in rows for _ in (0, 1)])
        text = "positions are encoded as ever (no intervention changes them)"
        if hidden:
            names = ", ".join(map(str, hidden))
            text = f"forgotten token {names} (red): rotated as ever, its key read by no later query"
        self.whatif_mark.show_run(self.controller.interventions, text)

    def on_result(self, kind: str, key: object, result: object) -> None:
        if kind == "positions":
            self.schedule()

    def show_view(self, view: PositionView, prompt: Any = None) -> None:
        """Draw ``view`` (pure: the view in, items updated); ``prompt`` labels the positions."""
        self.view, self._prompt = view, prompt
        if view.kind == ROPE and view.rope:
            self._show_rope(view)
        elif view.kind == LEARNED and view.learned is not None:
            self._draw_learned(view)
        elif view.kind == ALIBI:
            self._draw_alibi(view)
        else:
            self._show_note(NONE_NOTE)
            self.view = None

    def _show_rope(self, view: PositionView) -> None:
        self.rope_choice.blockSignals(True)
        self.rope_choice.clear()
        for s in view.rope:
            self.rope_choice.addItem(f"{s.layer_type} (layers {_spans(s.layers)})")
        self.rope_choice.setCurrentIndex(0)
        self.rope_choice.blockSignals(False)
        self.rope_choice.setVisible(len(view.rope) > 1)
        self._draw_rope(view.rope[0])

    def _rope_chosen(self, index: int) -> None:
        if self.view is not None and 0 <= index < len(self.view.rope):
            self._draw_rope(self.view.rope[index])

    def _draw_rope(self, rope: RopeSet) -> None:
        self.rope = rope
        self.stack.setCurrentWidget(self.rope_view)
        self.stack.setVisible(True)
        pairs = np.arange(rope.pairs, dtype=np.float64)
        self.freq_curve.setData(pairs, rope.inv_freq)
        self.score_curve.setData(rope.distances, rope.score_vs_distance)
        self.angles.setImage(rope.angles, levels=(0.0, 2 * math.pi))
        rows, cols = rope.angles.shape
        self.angle_plot.setRange(xRange=(0, cols), yRange=(0, rows), padding=0)
        self._position_ticks(self.angle_plot, rows)
        self.summary.setText(self._rope_text(rope, len(self.view.rope) if self.view else 1))

    def _position_ticks(self, plot: Any, rows: int) -> None:
        prompt = self._prompt
        plot.setLabel("left", "prompt position" if prompt is not None else "position")
        if prompt is None:
            plot.getAxis("left").setTicks(None)
            return
        labels = [f"{i} {visible_text(t.text, 8)}" for i, t in enumerate(prompt.tokens)][:rows]
        every = max(1, math.ceil(len(labels) * 14 / max(plot.getViewBox().height(), 150)))
        plot.getAxis("left").setTicks([[(i + 0.5, labels[i]) for i in range(0, rows, every)]])

    @staticmethod
    def _rope_text(rope: RopeSet, sets: int) -> str:
        waves = rope.wavelengths
        which = f"{rope.layer_type} layers ({_spans(rope.layers)}): " if sets > 1 else ""
        theta = f"θ = {rope.theta:g}, " if rope.theta else ""
        scaled = "" if rope.rope_type == "default" else f"{rope.rope_type} scaling, "
        factor = "" if rope.attention_scaling == 1 else f"cos/sin × {rope.attention_scaling:.4g}, "
        rotated = (
            f"all {rope.head_dim} dimensions of each head rotated in {rope.pairs} pairs"
            if rope.rotary_dim == rope.head_dim
            else f"only {rope.rotary_dim} of head_dim {rope.head_dim} rotated ({rope.pairs} "
            f"pairs; the other {rope.head_dim - rope.rotary_dim} carry no position)"
        )
        return (
            f"RoPE from the model's rotary module: {which}{theta}{scaled}{factor}{rotated}. "
            f"Wavelength (2π / frequency): fastest pair {waves.min():.3g} tokens, "
            f"slowest pair {waves.max():.3g} tokens."
        )

    def _draw_learned(self, view: PositionView) -> None:
        table = view.learned
        assert table is not None
        self.rope_choice.setVisible(False)
        self.stack.setCurrentWidget(self.learned_view)
        self.stack.setVisible(True)
        lim = float(np.abs(table.table).max()) or 1.0
        self.table_image.setImage(table.table, levels=(-lim, lim))
        self.similarity.setImage(table.similarity, levels=(-1.0, 1.0))
        rows = table.table.shape[0]
        self.table_plot.setRange(xRange=(0, table.table.shape[1]), yRange=(0, rows), padding=0)
        self.similarity_plot.setRange(xRange=(0, rows), yRange=(0, rows), padding=0)
        self._position_ticks(self.table_plot, rows)
        offset = f" (rows {table.offset}+: OPT offsets positions by {table.offset})"
        self.summary.setText(
            f"Learned absolute positions: {table.module} holds one vector per position "
            f"({table.table_size} positions){offset if table.offset else ''}, added to the token "
            f"embedding before layer 0. Shown: positions 0–{rows - 1}; right, how alike they are."
        )

    def _draw_alibi(self, view: PositionView) -> None:
        self.rope_choice.setVisible(False)
        if view.alibi is None:
            self._show_note("ALiBi: each head penalises distant keys; this model's code does not "
                            "expose its slopes (no build_alibi_tensor).")  # fmt: skip
            return
        slopes, scale = view.alibi.slopes.astype(np.float64), view.alibi.bias_scale
        self.stack.setCurrentWidget(self.alibi_view)
        self.stack.setVisible(True)
        heads = np.arange(slopes.shape[0])
        self.slope_bars.setOpts(x=heads, height=slopes)
        for curve in self.bias_curves:
            self.bias_plot.removeItem(curve)
        d = np.arange(ALIBI_DISTANCE, dtype=np.float64)
        self.bias_curves = [
            self.bias_plot.plot(d, -s * scale * d, pen=pg.intColor(h, len(slopes)))
            for h, s in enumerate(slopes)
        ]
        scaled = f" × {scale:.4g} (Falcon divides by √head_dim)" if scale != 1 else ""
        self.summary.setText(
            f"ALiBi: no position vector; head h adds slope[h] × key position{scaled} to its "
            f"scores, i.e. a penalty growing with distance. {len(slopes)} heads, slopes "
            f"{slopes.max():.3g} … {slopes.min():.3g} (from the model's build_alibi_tensor)."
        )

    def _show_note(self, note: str) -> None:
        self.rope = None
        self.stack.setVisible(False)
        self.rope_choice.setVisible(False)
        self.summary.setText(note)

    # ----------------------------------------------------------------- its story
    def _shown_rope(self) -> RopeSet | None:
        """The rotary set drawn, or None for a learned table, ALiBi or no positions."""
        return self.rope if self.view is not None and self.view.rope else None

    def install_marks(self) -> bool:
        """A band over the selected token's row of rotation angles."""
        self._band = pg.PlotDataItem(pen=MARK_PEN)
        self.angle_plot.addItem(self._band, ignoreBounds=True)
        return True

    def mark_token(self, position: int) -> None:
        rope = self._shown_rope()
        if rope is None or not 0 <= position < rope.angles.shape[0]:
            self._band.setData([], [])
            self.linked = {}
            return
        self._band.setData(*rect_xy(0, position, rope.angles.shape[1], position + 1))
        self.linked = {"angle_row": np.asarray(rope.angles[position]).copy()}

    def angle_text(self, x: float, y: float) -> str:
        """'position 5 'the', dimension pair 3: angle 1.23 rad mod 2π (frequency …)'."""
        rope = self._shown_rope()
        if rope is None:  # a learned table or ALiBi: no rotation angles
            return ""
        row, pair = int(math.floor(y)), int(math.floor(x))
        if not (0 <= row < rope.angles.shape[0] and 0 <= pair < rope.angles.shape[1]):
            return ""
        tokens = context_tokens(self.controller)
        text = f" {tokens[row].text!r}" if row < len(tokens) else ""
        return (
            f"position {row}{text}, dimension pair {pair}: angle "
            f"{float(rope.angles[row, pair]):.3f} rad mod 2π (frequency "
            f"{float(rope.inv_freq[pair]):.4g} rad / token)"
        )

    def hover_targets(self) -> list[HoverTarget]:
        return [HoverTarget(self.angle_plot, self.angle_text)]

    def explainer(self) -> ex.Explainer | None:
        rope, ctl = self._shown_rope(), self.controller
        if rope is None or ctl.info is None:  # learned positions or ALiBi: the pane says which
            return None
        chosen = selected_token(ctl)
        pos, text = (chosen[0], chosen[1].text) if chosen is not None else (0, None)
        return ex.positions_card(rope.theta, rope.inv_freq, pos, text)

    # ----------------------------------------------------------------- clear / export
    def clear(self) -> None:
        """Drop the cache key so the next render redraws for the new prompt or model."""
        self._key = None

    def plot_items(self) -> list[Any]:
        widget = self.stack.currentWidget()
        return [widget.scene()] if self.view is not None and widget is not None else []

    def csv_table(self) -> tuple[Sequence[str], Sequence[Sequence[Any]]]:
        view = self.view
        if view is not None and view.kind == ALIBI and view.alibi is not None:
            return ("head", "slope"), [(h, float(s)) for h, s in enumerate(view.alibi.slopes)]
        if view is not None and view.kind == LEARNED and view.learned is not None:
            sim = view.learned.similarity
            return ("position", "norm", "similarity_to_previous"), [
                (p, float(np.linalg.norm(row)), float(sim[p, p - 1]) if p else 1.0)
                for p, row in enumerate(view.learned.table)
            ]
        if self.rope is None:
            return ("pair", "inv_freq", "wavelength"), []
        inv = self.rope.inv_freq.astype(np.float64)
        rows = [(i, float(f), float(2 * np.pi / f)) for i, f in enumerate(inv)]
        return ("pair", "inv_freq", "wavelength"), rows


def _spans(layers: Sequence[int]) -> str:
    """(0, 1, 2, 5) → '0–2, 5'."""
    out: list[str] = []
    for i in layers:
        if out and out[-1].split("–")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('–')[0]}–{i}"
        else:
            out.append(str(i))
    return ", ".join(out)
