"""KV-cache memory: what the cache actually holds, step by step, beside the formula for it.

The measured bytes are summed from the key and value tensors the cache holds after each forward
pass; the formula is 2 × layers × kv_heads × head_dim × bytes × tokens, summed per layer over the
tokens each holds (a sliding-window layer stops at window − 1, so it stops growing). They must
coincide, and the dashed line shows what the same context would cost if every query head kept its
own K and V. The x axis counts tokens as the model has seen them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from llm_lens.core import cards as ex
from llm_lens.core.kvcache.formula import per_layer_terms
from llm_lens.core.kvcache.measure import no_cache_line
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.whatif import forgotten
from llm_lens.desktop.widgets.pane import Pane, plain_axis, steady_axes

UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: float) -> str:
    """1536 → '1.50 KiB': binary units, three significant figures."""
    value, unit = float(n), 0
    while abs(value) >= 1024 and unit < len(UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{int(value)} bytes" if unit == 0 else f"{value:.3g} {UNITS[unit]}"


def forget_lines(interventions: Any, kv: Any) -> list[str]:
    """What a forgotten token costs (What if?): its K and V stay in the cache, masked from every
    later query, so the bytes are held all the same; the share is exact where every layer holds
    every token (no sliding window)."""
    hidden = [p for p in forgotten(interventions) if p < kv.tokens]
    if not hidden:
        return []
    share = ""
    if not any(kv.windows) and kv.tokens:
        per = kv.bytes_total // kv.tokens
        share = f"{human_bytes(per * len(hidden))} ({per:,} bytes a token) of it"
    where = ", ".join(map(str, hidden))
    return [f"forgotten token {where}: {share or 'its K and V'} still held, hidden from every "
            "later query by the attention mask (not evicted)"]  # fmt: skip


class ByteAxis(pg.AxisItem):
    """A y axis over data in bytes, ticked and labelled in one binary unit (KiB, MiB…).

    Formatting the ticks here (rather than ``AxisItem.setScale``) keeps the labels right
    however the plot is re-laid out; the plotted data stay in bytes.
    """

    def __init__(self, orientation: str = "left") -> None:
        super().__init__(orientation)
        plain_axis(self)
        self.power = 0

    def set_largest(self, largest: float) -> None:
        power = 0
        while largest >= 1024 ** (power + 1) and power < len(UNITS) - 1:
            power += 1
        if power != self.power:
            self.power = power
            self.picture = None
            self.update()
        if self.labelText != UNITS[power]:  # a new label re-lays out the plot
            self.setLabel(UNITS[power])

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list:  # noqa: N802
        unit = 1024.0**self.power
        levels = super().tickValues(minVal / unit, maxVal / unit, size)
        return [(spacing * unit, [v * unit for v in values]) for spacing, values in levels]

    def tickStrings(self, values: list, scale: float, spacing: float) -> list[str]:  # noqa: N802
        unit = 1024.0**self.power
        return super().tickStrings([v / unit for v in values], scale, spacing / unit)


def byte_axis(plot: pg.PlotItem, largest: float) -> None:
    """Label a plot's y axis in the binary unit that suits ``largest``; the data stay in bytes."""
    axis = plot.getAxis("left")
    assert isinstance(axis, ByteAxis)
    axis.set_largest(largest)


class KVCachePane(Pane):
    """Bytes held by the KV cache over the run, per layer for the selected step, and the formula."""

    title = "KV cache"
    capability = "kv_cache"  # a served run has none: the note says so (Pane.missing_line)
    empty_text = (
        "The bytes the KV cache holds at each step, beside the formula. Run a prompt "
        "(Ctrl+Enter) to see it."
    )
    live_interval_ms = 100  # two plots over the whole run

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.view = pg.GraphicsLayoutWidget()
        self._build_growth()
        self._build_layers()
        self.formula_label = QLabel()
        self.formula_label.setWordWrap(True)
        self.formula_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.view, stretch=1)
        layout.addWidget(self.formula_label)
        self.clear()

    def _build_growth(self) -> None:
        """Bytes vs tokens: measured points, formula line, full-MHA dashed line, prefill jump."""
        plot = self.growth_plot = self.view.addPlot(
            row=0, col=0, title="KV cache memory", axisItems={"left": ByteAxis()}
        )
        plot.setLabel("bottom", "tokens seen")
        plot.addLegend(offset=(5, 5), labelTextSize="8pt")
        self.mha_curve = plot.plot(
            pen=pg.mkPen("#ef9a9a", width=2, style=Qt.PenStyle.DashLine), name="if full MHA"
        )
        self.jump_curve = plot.plot(
            pen=pg.mkPen("#9e9e9e", width=1, style=Qt.PenStyle.DotLine), name="prefill jump"
        )
        self.formula_curve = plot.plot(pen=pg.mkPen("#ffb74d", width=4), name="formula")
        self.measured_curve = plot.plot(
            pen=None,
            symbol="o",
            symbolSize=5,
            symbolBrush="#4fc3f7",
            symbolPen=None,
            name="measured",
        )
        self.selected_point = pg.ScatterPlotItem(size=11, pen=pg.mkPen("w", width=2), brush=None)
        plot.addItem(self.selected_point)
        # a hybrid's two parts apart (in the legend once a model has state): the K/V that grow
        # and the conv/recurrent state that does not
        self.growing_curve = plot.plot(pen=pg.mkPen("#4fc3f7", width=1))
        self.state_curve = plot.plot(pen=pg.mkPen("#81c784", width=2, style=Qt.PenStyle.DashLine))

    def _build_layers(self) -> None:
        """Per-layer bars of key and value bytes for the selected step."""
        plot = self.layer_plot = self.view.addPlot(
            row=0, col=1, title="per layer (selected step)", axisItems={"left": ByteAxis()}
        )
        plot.setLabel("bottom", "layer")
        plot.addLegend(offset=(5, 5), labelTextSize="8pt", colCount=2)
        # stacked: keys at the bottom, values on top of them
        self.key_bars = pg.BarGraphItem(
            x=[], height=[], width=0.8, brush="#4fc3f7", pen=None, name="keys"
        )
        self.value_bars = pg.BarGraphItem(
            x=[], height=[], y0=[], width=0.8, brush="#ce93d8", pen=None, name="values"
        )
        self.state_bars = pg.BarGraphItem(
            x=[], height=[], y0=[], width=0.8, brush="#81c784", pen=None
        )  # a hybrid layer's constant conv/recurrent state, on top of its K/V
        plot.addItem(self.key_bars)
        plot.addItem(self.value_bars)
        plot.addItem(self.state_bars)
        steady_axes(self.growth_plot, self.layer_plot)
        self.view.ci.layout.setColumnStretchFactor(0, 3)
        self.view.ci.layout.setColumnStretchFactor(1, 2)

    # ----------------------------------------------------------------- rendering
    def clear(self) -> None:
        curves = (self.mha_curve, self.jump_curve, self.formula_curve, self.measured_curve,
                  self.growing_curve, self.state_curve)  # fmt: skip
        for curve in curves:
            curve.setData([], [])
        self.state_bars.setOpts(x=[], height=[], y0=[])
        self.selected_point.setData([], [])
        self.key_bars.setOpts(x=[], height=[])
        self.value_bars.setOpts(x=[], height=[], y0=[])
        self.formula_label.setText("no run yet: the KV cache is empty")

    def render(self, step: Any) -> None:
        steps = self.controller.steps
        if step is None or not steps:
            self.clear()
            return
        tokens = np.array([s.kv.tokens for s in steps], np.int64)
        self.measured_curve.setData(tokens, [s.kv.bytes_total for s in steps])
        self.formula_curve.setData(tokens, [s.kv.formula_bytes for s in steps])
        self.mha_curve.setData(tokens, [s.kv.mha_bytes for s in steps])
        # the prefill writes all prompt tokens at once: from an empty cache straight to step 0
        self.jump_curve.setData([0, tokens[0]], [0, steps[0].kv.bytes_total])
        self.selected_point.setData([step.kv.tokens], [step.kv.bytes_total])
        per_layer = np.asarray(step.kv.per_layer)
        layers = np.arange(per_layer.shape[0])
        self.key_bars.setOpts(x=layers, height=per_layer[:, 0])
        self.value_bars.setOpts(x=layers, height=per_layer[:, 1], y0=per_layer[:, 0])
        state = self._draw_state(steps, step, tokens, per_layer)
        windowed = [str(i) for i, w in enumerate(step.kv.windows) if w > 0]
        title = "per layer (selected step)"
        if windowed:
            title = f"per layer (selected step); windowed: {', '.join(windowed)}"
        if self.layer_plot.titleLabel.text != title:  # a new title re-lays out the plot
            self.layer_plot.setTitle(title)
        top = float((per_layer.sum(axis=1) + state).max())
        self.layer_plot.setYRange(0, top * 1.25)  # head-room for the legend
        byte_axis(self.layer_plot, top)
        byte_axis(self.growth_plot, float(steps[-1].kv.mha_bytes))
        self.formula_label.setText(self.formula_text(step))

    def _draw_state(self, steps: Any, step: Any, tokens: Any, per_layer: Any) -> Any:
        """A hybrid's K/V that grow and its constant state as two curves, and each layer's
        state on top of its bars; the per-layer state (zeros for a model without)."""
        state = np.zeros(per_layer.shape[0], np.int64)
        if step.kv.state_per_layer is None:
            self.growing_curve.setData([], [])
            self.state_curve.setData([], [])
            self.state_bars.setOpts(x=[], height=[], y0=[])
            return state
        state = np.asarray(step.kv.state_per_layer)
        legend = self.growth_plot.legend
        if legend is not None and not any(i[1].text == "state (constant)" for i in legend.items):
            legend.addItem(self.growing_curve, "K/V (grow)")
            legend.addItem(self.state_curve, "state (constant)")
            self.layer_plot.legend.addItem(self.state_bars, "state")
        self.growing_curve.setData(tokens, [s.kv.growing_bytes for s in steps])
        self.state_curve.setData(tokens, [s.kv.state_bytes for s in steps])
        self.state_bars.setOpts(x=np.arange(len(state)), height=state, y0=per_layer.sum(axis=1))
        return state

    def formula_text(self, step: Any) -> str:
        """The formula with this model's numbers, the measurement, the GQA saving, device memory."""
        info, kv = self.controller.info, step.kv
        if kv.no_cache:  # GPT-1: nothing held, and no formula of a cache it never keeps
            return no_cache_line(kv.tokens)
        lines = [self._formula_line(step), *self._held_lines(info, kv), *self._state_lines(kv)]
        lines.append(self._sharing_line(info, kv))
        lines.append(f"added this step: {human_bytes(kv.bytes_added)} ({self._added(step)})")
        lines += forget_lines(self.controller.interventions, kv)
        if kv.device_allocated is not None:
            lines.append(
                f"CUDA memory: allocated {human_bytes(kv.device_allocated)}, "
                f"reserved {human_bytes(kv.device_reserved or 0)}"
            )
        else:
            lines.append("CPU: device memory n/a")
        from llm_lens.core.placement import kv_device_line, model_placement_line

        spread = [kv_device_line(kv), model_placement_line(info) if info is not None else ""]
        lines += [line for line in spread if line]  # a model spread by a device map
        return "\n".join(lines)

    def _formula_line(self, step: Any) -> str:
        info, kv = self.controller.info, step.kv
        verdict = ", equal)" if kv.formula_bytes == kv.bytes_total else ", DIFFERENT)"
        measured = f"(measured: {kv.bytes_total:,} bytes{verdict}"
        windows = [w for w in kv.windows if w > 0]
        terms = per_layer_terms(info, kv.tokens, kv.windows)
        if terms:  # layers differ in K/V heads or head size (MiMo, Inkling, Gemma 4)
            state = f" + state({kv.state_formula_bytes:,})" if kv.state_formula_bytes else ""
            return (
                f"step {step.index}: Σ layers 2 × kv_heads(layer) × head_dim(layer) × "
                f"bytes × tokens held = {terms}{state} = {kv.formula_bytes:,} bytes = "
                f"{human_bytes(kv.formula_bytes)} {measured}"
            )
        if not windows:
            layers, state = info.num_layers, ""
            if kv.state_per_layer is not None:  # a hybrid: K/V layers only, plus the state
                layers = int((np.asarray(kv.per_layer).sum(axis=1) > 0).sum())
                state = f" + state({kv.state_formula_bytes:,})"
            return (
                f"step {step.index}: 2 × layers({layers}) × kv_heads({info.num_kv_heads})"
                f" × head_dim({info.head_dim}) × bytes({info.dtype_bytes}) × tokens({kv.tokens})"
                f"{state} = {kv.formula_bytes:,} bytes = {human_bytes(kv.formula_bytes)} {measured}"
            )
        full = len(kv.windows) - len(windows)
        held = ", ".join(
            f"{windows.count(w)} with a {w}-token window hold {min(kv.tokens, w - 1)}"
            for w in sorted(set(windows))
        )
        return (
            f"step {step.index}: Σ layers 2 × kv_heads({info.num_kv_heads}) × "
            f"head_dim({info.head_dim}) × bytes({info.dtype_bytes}) × tokens held = "
            f"{kv.formula_bytes:,} bytes = {human_bytes(kv.formula_bytes)} {measured}\n"
            f"tokens seen: {kv.tokens}; {full} full-attention layers hold all of them, {held} "
            "(a sliding-window layer keeps only its last window − 1 tokens)"
        )

    @staticmethod
    def _sharing_line(info: Any, kv: Any) -> str:
        """What sharing K/V heads saves: nothing for MHA, a factor for GQA and MQA."""
        kind = info.head_sharing
        if kind == "MHA":
            return f"MHA: each of the {info.num_heads} heads keeps its own K and V (no saving)"
        saving = kv.mha_bytes / kv.bytes_total if kv.bytes_total else float("nan")
        return (
            f"with full MHA ({info.num_heads} KV heads): {human_bytes(kv.mha_bytes)} — "
            f"{kind} saves ×{saving:.3g}"
        )

    @staticmethod
    def _state_lines(kv: Any) -> list[str]:
        """A hybrid's two parts: the K/V that grow, the state that does not, and what the same
        model would hold were every layer attention like its attention layers."""
        if kv.state_per_layer is None:
            return []
        per_layer = np.asarray(kv.per_layer).sum(axis=1)
        kv_layers = int((per_layer > 0).sum())
        lines = [
            f"grows: K/V {human_bytes(kv.growing_bytes)} in {kv_layers} layers; constant: "
            f"conv/recurrent state {human_bytes(kv.state_bytes)} in "
            f"{int((np.asarray(kv.state_per_layer) > 0).sum())} layers (formula "
            f"{human_bytes(kv.state_formula_bytes)}), the same at any context length"
        ]
        if kv_layers:
            full = kv.growing_bytes * len(per_layer) // kv_layers
            lines.append(
                f"with every layer attention like these: {human_bytes(full)} of K/V, growing"
            )
        return lines

    @staticmethod
    def _held_lines(info: Any, kv: Any) -> list[str]:
        """When the tensors hold another number of heads than the config's KV heads, say so."""
        held = kv.cached_kv_heads
        if held is None or held == info.num_kv_heads or held == max(info.layer_kv_heads, default=0):
            return []  # (layers with K/V heads of their own, MiMo's: the formula has them)
        return [
            f"the cache holds K/V for {held} heads per layer, the config has {info.num_kv_heads} "
            f"KV heads: this model's transformers code stores K/V "
            + ("repeated to every query head" if held == info.num_heads else f"for {held} heads")
            + "; the bytes shown are those held, the formula uses the config's KV heads"
        ]

    @staticmethod
    def _added(step: Any) -> str:
        if step.is_prefill:
            return "the prefill wrote the whole prompt"
        windows = step.kv.windows
        if windows and all(0 < w <= step.kv.tokens for w in windows):
            return "one token; every layer's window is full, so each dropped its oldest token"
        if any(0 < w <= step.kv.tokens for w in windows):
            return "one token, in the full-attention layers only: the windowed ones are full"
        return "one token"

    # ----------------------------------------------------------------- its story
    def explainer(self) -> ex.Explainer | None:
        ctl = self.controller
        step = ctl.current_step()
        return None if step is None or ctl.info is None else ex.kvcache_card(ctl.info, step)

    # ----------------------------------------------------------------- export
    def plot_items(self) -> list[Any]:
        return [self.view.ci, self.growth_plot, self.layer_plot]

    def csv_table(self) -> tuple[Sequence[str], Sequence[Sequence[Any]]]:
        header = ("step", "tokens", "bytes_total", "bytes_added", "formula_bytes", "mha_bytes")
        rows = [
            (
                s.index,
                s.kv.tokens,
                s.kv.bytes_total,
                s.kv.bytes_added,
                s.kv.formula_bytes,
                s.kv.mha_bytes,
            )
            for s in self.controller.steps
        ]
        return header, rows
