"""Logits pane: the selected step's raw next-token distribution, top 20, as horizontal bars.

Horizontal bars keep the token labels readable on the axis. The token the run chose is drawn in
another colour; when it is not among the top 20 the text line says so and gives its rank.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from llm_lens.core import cards as ex
from llm_lens.core.records import StepRecord
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.bars import (
    BAR_BRUSH,
    CHOSEN_BRUSH,
    bar_values,
    horizontal_bars,
    tick_label,
)
from llm_lens.desktop.widgets.card import Card
from llm_lens.desktop.widgets.pane import HoverTarget, Pane, plain_axis, steady_axes
from llm_lens.desktop.widgets.token_text import piece_label

__all__ = ["CHOSEN_BRUSH", "LogitsPane", "bar_values", "tick_label"]

TOP = 20
CLEAN_BRUSH = pg.mkBrush(255, 255, 255, 200)  # the clean run's bar: a thin line in each bar


def probability_ticks(top: float) -> list[tuple[float, str]]:
    """Ticks of a probability axis from 0 to ``top`` and never past 1: the plot reaches a
    quarter further for the bars' labels, and an axis to 1.1 read as a probability of 1.1."""
    top = min(max(top, 0.0), 1.0)
    step = next((s for s in (0.01, 0.02, 0.05, 0.1) if top / s <= 6), 0.2)
    return [(float(v), f"{v:g}") for v in np.arange(0.0, top + 1e-9, step).round(2)]


class LogitsPane(Pane):
    """Top-20 of the selected step's raw distribution, the chosen token highlighted."""

    title = "Logits"
    empty_text = (
        "The model's top scores for the next token at the selected step. Run a prompt "
        "(Ctrl+Enter) to see it."
    )
    card_follows_params = True
    capability = "logprobs"  # a tokens-only served run has none: the note says so

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.plot_widget = pg.PlotWidget()
        self.plot = self.plot_widget.getPlotItem()
        self.plot.invertY(True)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.showGrid(x=True, alpha=0.25)
        self.plot.setMenuEnabled(False)
        plain_axis(self.plot.getAxis("bottom"))
        steady_axes(self.plot)
        self.bars = horizontal_bars(TOP)
        self.plot.addItem(self.bars)
        zeros = np.zeros(TOP)  # the clean run's bars, beside an intervened run's (What if?)
        self.clean_bars = pg.BarGraphItem(
            x0=zeros, y=np.arange(TOP), width=zeros, height=0.18, brush=CLEAN_BRUSH, pen=None
        )
        self.plot.addItem(self.clean_bars)
        self.clean_ends: np.ndarray | None = None  # as drawn (tests read them)
        self.values = [pg.TextItem(anchor=(0, 0.5)) for _ in range(TOP)]
        for item in self.values:
            self.plot.addItem(item)
        self.log_scale = QCheckBox("log scale")
        self.log_scale.toggled.connect(lambda _on: self.render(self.controller.current_step()))
        self.show_logits = QCheckBox("logits")
        self.show_logits.setToolTip(
            "Show the raw scores (logits) the softmax turns into these probabilities"
        )
        self.show_logits.toggled.connect(lambda _on: self.render(self.controller.current_step()))
        self.info = QLabel()
        self.info.setWordWrap(True)
        self.info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.chosen_row: int | None = None
        self._step: StepRecord | None = None
        row = QHBoxLayout()
        row.addWidget(self.info, 1)
        row.addWidget(self.log_scale)
        row.addWidget(self.show_logits)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.plot_widget, 1)
        self.clear()

    def render(self, step: StepRecord | None) -> None:
        if step is None:
            self.clear()
            return
        n = min(TOP, len(step.top_probs))
        if n == 0:  # a server that returned no alternatives
            self.clear()
            self.info.setText("this server returned no alternatives for this step")
            return
        self._step = step
        probs = np.asarray(step.top_probs[:n])
        log = self.log_scale.isChecked()
        ends, base = bar_values(probs, log)
        as_logits = self.show_logits.isChecked()
        if as_logits:  # raw scores: bars from just below the smallest shown
            ends = np.asarray(step.top_logits[:n], np.float64)
            base = float(math.floor(ends.min()) - 1.0)
        hits = np.flatnonzero(step.top_ids[:n] == step.token.id)
        if step.token.id < 0:  # a server that names tokens by text: its rank places it
            hits = np.array([step.rank] if step.rank < n else [], np.int64)
        self.chosen_row = int(hits[0]) if hits.size else None
        brushes = [CHOSEN_BRUSH if i == self.chosen_row else BAR_BRUSH for i in range(n)]
        self.bars.setOpts(
            x0=np.full(n, base), y=np.arange(n), width=ends - base, height=0.75, brushes=brushes
        )
        for i, item in enumerate(self.values):
            shown = "" if i >= n else f"{ends[i]:.2f}" if as_logits else f"{probs[i]:.2%}"
            item.setText(shown)
            item.setPos(float(ends[i]) if i < n else 0.0, i)
        ticks = [(i, tick_label(i + 1, step.top_texts[i])) for i in range(n)]
        self.plot.getAxis("left").setTicks([ticks, []])
        label = "log10 probability" if log else "probability"
        label = "logit (raw score)" if as_logits else label
        if self.plot.getAxis("bottom").labelText != label:  # a new label re-lays out the plot
            self.plot.setLabel("bottom", label)
        top = self._draw_clean(step, n, log, as_logits, base, float(ends.max()))
        span = top - base
        self.plot.setXRange(base, top + 0.25 * span, padding=0)
        probability = not (log or as_logits)  # the room for the bars' labels is no probability
        self.plot.getAxis("bottom").setTicks(
            [probability_ticks(float(ends.max()))] if probability else None
        )
        self.plot.setYRange(-0.6, n - 0.4, padding=0)
        self.info.setText(self._describe(step))

    def _draw_clean(
        self, step: StepRecord, n: int, log: bool, as_logits: bool, base: float, top: float
    ) -> float:
        """The clean run's value of each shown token as a thin line in its bar, when the run
        shown is intervened and a clean run read the same context (What if?); returns the
        largest value drawn (for the range)."""
        ctl = self.controller
        clean = ctl.whatif.clean_step(step) if ctl.interventions else None
        if clean is None:
            self.clean_ends = None
            self.clean_bars.setOpts(x0=np.zeros(TOP), y=np.arange(TOP), width=np.zeros(TOP))
            return top
        logits = np.asarray(clean.logits, np.float64)
        ids = np.asarray(step.top_ids[:n], np.int64)
        values = logits[ids] - np.logaddexp.reduce(logits)  # clean log-probabilities
        ends = logits[ids] if as_logits else values / np.log(10) if log else np.exp(values)
        ends = np.maximum(ends, base)
        self.clean_ends = ends
        self.clean_bars.setOpts(x0=np.full(n, base), y=np.arange(n), width=ends - base)
        return max(top, float(ends.max()))

    def _describe(self, step: StepRecord) -> str:
        """Chosen token, rank, probability, logprob and the entropy of the full distribution."""
        where = "" if self.chosen_row is not None else f" (outside the top {TOP})"
        bits = step.entropy / math.log(2)
        kind = "prefill" if step.is_prefill else f"step {step.index}"
        kind = f"intervened {kind}" if self.controller.interventions else kind
        if self.clean_ends is not None:
            kind += " (white lines: the clean run)"
        tok = step.token
        return (
            f"{kind}: chose {piece_label(tok.text, tok.raw, tok.special)} (id {tok.id}) · "
            f"rank {step.rank + 1}{where} · p = {step.prob:.4f} · logprob = {step.logprob:.3f} · "
            f"entropy = {step.entropy:.3f} nats = {bits:.3f} bits"
            + (f" (≥: from the {len(step.top_probs)} alternatives the server returned)"
               if step.approximate else "")
        )  # fmt: skip

    def clear(self) -> None:
        self._step, self.chosen_row = None, None
        zeros = np.zeros(TOP)
        self.bars.setOpts(x0=zeros, y=np.arange(TOP), width=zeros, brushes=[BAR_BRUSH] * TOP)
        self.clean_bars.setOpts(x0=zeros, y=np.arange(TOP), width=zeros)
        self.clean_ends = None
        for item in self.values:
            item.setText("")
        self.plot.getAxis("left").setTicks([[], []])
        self.plot.getAxis("bottom").setTicks(None)
        self.plot.setXRange(0.0, 1.0, padding=0)  # an empty plot: probabilities 0…1
        self.plot.setYRange(-0.6, TOP - 0.4, padding=0)
        self.info.setText("no step selected")

    # ----------------------------------------------------------------- its story
    def bar_text(self, y: float) -> str:
        """'rank 1: ' type' id 1234 · logit 17.21 · probability 91.20 %'."""
        step, row = self._step, int(round(y))
        if step is None or not 0 <= row < min(len(step.top_ids), TOP):
            return ""
        return (
            f"rank {row + 1}: {step.top_texts[row]!r} id {int(step.top_ids[row])} · "
            f"logit {float(step.top_logits[row]):.3f} · "
            f"probability {float(step.top_probs[row]):.4%}"
        )

    def hover_targets(self) -> list[HoverTarget]:
        return [HoverTarget(self.plot, lambda x, y: self.bar_text(y))]

    def explainer(self) -> ex.Explainer | None:
        ctl = self.controller
        step = ctl.current_step()
        params = ctl.run_params if ctl.busy else ctl.params  # no re-staging beside a streaming run
        return None if step is None else ex.logits_card(step, params, params == ctl.run_params)

    def attach_card(self, card: Card) -> None:
        """The softmax written out is in the card's body: showing logits opens it."""
        super().attach_card(card)
        self.show_logits.toggled.connect(card.toggle.setChecked)

    # ----------------------------------------------------------------- export
    def plot_items(self) -> list[Any]:
        return [self.plot]

    def svg_widget(self) -> QWidget:
        return self.plot_widget

    def csv_table(self) -> tuple[list[str], list[list[Any]]]:
        header = ["rank", "id", "text", "logit", "prob"]
        step = self._step
        if step is None:
            return header, []
        n = min(TOP, len(step.top_probs))
        rows: list[list[Any]] = [
            [
                i + 1,
                int(step.top_ids[i]),
                step.top_texts[i],
                float(step.top_logits[i]),
                float(step.top_probs[i]),
            ]
            for i in range(n)
        ]
        if self.chosen_row is None:
            tok = step.token
            rows.append([step.rank + 1, tok.id, tok.text, float(step.logits[tok.id]), step.prob])
        return header, rows
