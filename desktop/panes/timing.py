"""Timing: why the first token takes longer than the rest, measured on this machine.

Each step's time is split into the forward pass, sampling and capture (copying the internals off
the model for the other panes), each counted only while the model thread was on a CPU; the time
it waited (for the GIL a painting GUI thread held, or for a core) and the time between steps
(the window taking the record, analyses served in between) are stacked apart, so the model's own
time is never confused with the instrument's. Where the waits cannot be measured (several torch
threads; a GPU whose waits for the device put the thread to sleep, checked when the model
loads) the pane says so rather than show 0 ms of waiting. The prefill reads the whole prompt in
one parallel pass; every decode step reads one new token plus the cached keys and values of all
earlier ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from llm_lens.core import cards as ex
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.pane import Pane, steady_axes
from llm_lens.desktop.widgets.whatif_mark import WhatIfMark, clean_steps, time_difference

PARTS = (
    ("forward", "forward", "#4fc3f7"),
    ("sample", "sample", "#ffb74d"),
    ("capture", "capture", "#ce93d8"),
    ("blocked", "waiting: GIL", "#e57373"),
    ("queued", "waiting: a CPU core", "#8d6e63"),
    ("between", "between steps", "#9e9e9e"),
)


def parts_of(t: Any) -> tuple[float, ...]:
    """A StepTiming as the stacked parts: own forward, sample, capture; waiting blocked (the GIL)
    and for a core (other threads and processes); between steps.

    They add up to the step's wall time (``t.wall_ms``)."""
    return (
        t.forward_ms - t.forward_wait_ms,
        t.sample_ms - t.sample_wait_ms,
        t.capture_ms - t.capture_wait_ms,
        t.blocked_ms,
        t.queue_ms,
        t.between_ms,
    )


# where wall minus the model thread's CPU time is not its waiting (several torch threads; a GPU
# whose waits for the device put the thread to sleep), the waits are 0 in the records: say so
UNMEASURED = "waiting (not measured with this device and thread count)"
WAITS = ("blocked", "queued")
NAN_RED = "#ef5350"  # the step where the model computed NaN or Inf


def runs_note(steps: int, offset: int) -> str:
    """On a branch's path of ``steps``, which steps were timed in which run: the first
    ``offset`` (the branch point's own included) are the run it branched from, with that run's
    prefill, the rest the branch's own."""
    if not 0 < offset < steps:
        return ""
    return (
        f"a branch: steps 0–{offset - 1} were timed in the run it branched from, "
        f"steps {offset}–{steps - 1} in the branch itself"
    )


def branch_offset(controller: Any) -> int:
    """Path steps before the shown run's own step 0 (0 for a root run)."""
    for node in getattr(controller.compare, "nodes", ()):
        if node.run_id == controller.run_id and node.parent_run_id is not None:
            return int(node.offset)
    return 0


def waiting_note(t: dict[str, np.ndarray]) -> str:
    """Where waiting for a core is a good part of the decode steps, what that means: the
    machine's load (other threads and programs on its cores), not the model's work."""
    decode = t["total_ms"][1:]
    queued = float(t["queued"][1:].sum())
    if not decode.size or queued < 0.25 * float(decode.sum()):
        return ""
    return (
        f" {queued / float(decode.sum()):.0%} of the decode steps' time was waiting for a CPU "
        "core: other threads and programs held the machine's cores. That is the machine's load, "
        "not the model's work; the forward, sample and capture parts are the model's own."
    )


def waits_measured(steps: Sequence[Any]) -> bool:
    """Whether the run's records measured the model thread's waits (every step did, or none)."""
    return all(s.timing.waits_measured for s in steps)


def timings(steps: Sequence[Any]) -> dict[str, np.ndarray]:
    """Per-step milliseconds of each part, the loop's total and the wall time, over the steps."""
    table = np.array([parts_of(s.timing) for s in steps], np.float64).reshape(-1, len(PARTS))
    out = {key: table[:, i] for i, (key, _, _) in enumerate(PARTS)}
    out["total_ms"] = np.array([s.timing.total_ms for s in steps], np.float64)
    out["wall_ms"] = table.sum(axis=1)
    return out


class TimingPane(Pane):
    """Stacked per-step time (forward, sample, capture, waiting, between steps), TTFT,
    inter-token latency, tokens/s.

    Clicking the plot, or dragging the marker, selects the step under it.
    """

    title = "Timing"
    empty_text = "How long the prefill and each step took. Run a prompt (Ctrl+Enter) to see it."
    live_interval_ms = 100  # stacked bars over the whole run

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.view = pg.PlotWidget(title="time per step (step 0 = prefill → first token)")
        self.plot = self.view.getPlotItem()
        self.plot.setLabel("bottom", "step")
        self.plot.setLabel("left", "ms")
        self.plot.addLegend(offset=(-5, 5), labelTextSize="8pt", colCount=3)
        steady_axes(self.plot)
        self.bars: dict[str, pg.BarGraphItem] = {}
        for key, name, colour in PARTS:
            bar = pg.BarGraphItem(
                x=[], height=[], y0=[], width=0.8, brush=colour, pen=None, name=name
            )
            self.plot.addItem(bar)
            self.bars[key] = bar
        self._waits_in_legend = True
        self.marker = pg.InfiniteLine(
            angle=90,
            movable=True,
            pen=pg.mkPen("w", width=2),
            hoverPen=pg.mkPen("#fff59d", width=3),
        )
        self.plot.addItem(self.marker)
        self.clean_ticks = pg.ScatterPlotItem(  # What if? the clean run's time of each step
            symbol="_", size=22, pen=pg.mkPen(255, 255, 255, 220, width=2)
        )
        self.plot.addItem(self.clean_ticks)
        self.marker.sigPositionChangeFinished.connect(self._on_marker_moved)
        self.plot.scene().sigMouseClicked.connect(self._on_clicked)
        self.plot.vb.sigResized.connect(self._on_view_resized)
        self.stats_label = QLabel()
        self.stats_label.setWordWrap(True)
        self.explain_label = QLabel()
        self.explain_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        self.whatif_mark = WhatIfMark()
        layout.addWidget(self.whatif_mark)
        layout.addWidget(self.view, stretch=1)
        layout.addWidget(self.stats_label)
        layout.addWidget(self.explain_label)
        self.non_finite_line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(NAN_RED))
        self.plot.addItem(self.non_finite_line)
        self.non_finite_label = QLabel()
        self.non_finite_label.setStyleSheet(f"color: {NAN_RED}")
        layout.addWidget(self.non_finite_label)
        controller.sig_run_finished.connect(self.schedule)
        controller.sig_non_finite.connect(self.mark_non_finite)
        self.mark_non_finite(None)
        self.clear()

    def mark_non_finite(self, placed: Any) -> None:
        """A red line at the step where the model computed NaN or Inf, and where it did."""
        self.non_finite_line.setVisible(placed is not None)
        self.non_finite_label.setVisible(placed is not None)
        if placed is not None:
            self.non_finite_line.setValue(placed.step)
            self.non_finite_label.setText(f"stopped: the model computed {placed.label}")

    # ----------------------------------------------------------------- rendering
    def clear(self) -> None:
        for bar in self.bars.values():
            bar.setOpts(x=[], height=[], y0=[])
        self.marker.setVisible(False)
        self.clean_ticks.setData([], [])
        self.whatif_mark.show_run(())
        self.stats_label.setText("no run yet")
        self.explain_label.setText("")

    def render(self, step: Any) -> None:
        steps = self.controller.steps
        if step is None or not steps:
            self.clear()
            return
        t = timings(steps)
        x = np.arange(len(steps))
        base = np.zeros(len(steps))
        for key, _, _ in PARTS:
            self.bars[key].setOpts(x=x, height=t[key], y0=base.copy())
            base += t[key]
        self._legend_waits(waits_measured(steps))
        clean = self._render_clean(steps, step)
        self._make_room_for_legend(max(float(base.max()), clean))
        self.marker.blockSignals(True)
        self.marker.setValue(step.index)
        self.marker.setVisible(True)
        self.marker.blockSignals(False)
        self.stats_label.setText(self.stats_text(steps, step))
        self.explain_label.setText(self.explanation(steps))

    def _render_clean(self, steps: Sequence[Any], step: Any) -> float:
        """What if? A white tick at the clean run's time of each step that read the same
        context, and the mark's line; returns the tallest tick (0: none)."""
        clean = clean_steps(self, steps)
        pairs = [(s.index, c.timing.wall_ms) for s, c in zip(steps, clean, strict=True)
                 if c is not None and c.timing is not None]  # fmt: skip
        self.clean_ticks.setData([x for x, _ in pairs], [y for _, y in pairs])
        self.whatif_mark.show_run(
            self.controller.interventions, time_difference(step, self.clean_step(step))
        )
        return max((y for _, y in pairs), default=0.0)

    def _make_room_for_legend(self, tallest: float) -> None:
        """The value axis reaches above the tallest bar by the legend's share of the plot's
        height, so the legend (top right) sits over empty space, never over a bar; a plot too
        short to spare it that room shows no legend (the lines below name the parts)."""
        legend = self.plot.legend
        view_h = self.plot.vb.height()
        legend_h = legend.boundingRect().height() + 12  # + its offset and a gap
        fits = legend_h <= 0.5 * view_h
        legend.setVisible(fits)
        share = legend_h / view_h if fits else 0.05
        self.plot.setYRange(0, tallest / (1 - share), padding=0)

    def _on_view_resized(self, *_: object) -> None:
        """The legend's share of the height changes with the plot's: the room follows."""
        steps = self.controller.steps
        if steps and self.marker.isVisible():
            self._make_room_for_legend(float(timings(steps)["wall_ms"].max()))

    def _legend_waits(self, measured: bool) -> None:
        """The waits' colours in the legend only where the run measured them."""
        if measured == self._waits_in_legend:
            return
        self.plot.legend.clear()
        for key, name, _ in PARTS:
            if measured or key not in WAITS:
                self.plot.legend.addItem(self.bars[key], name)
        self._waits_in_legend = measured

    def stats_text(self, steps: Sequence[Any], step: Any) -> str:
        """TTFT, the decode steps' time and rate, the selected step's parts.

        One set of figures: a step's time is the loop's own (``total_ms``, as TTFT, the
        latency and the card measure it); a decode step is the mean inter-token latency here,
        in the card and in the explanation, and the parts on the second line add up to it."""
        t = timings(steps)
        decode = t["total_ms"][1:]
        summary = self.controller.summary
        finished = summary is not None and summary.run_id == self.controller.run_id
        overall = f", overall {summary.tokens_per_s:.1f} tokens/s" if finished else " (running)"
        ttft = float(t["total_ms"][0])
        itl = float(decode.mean()) if decode.size else float("nan")
        rate = decode.size / decode.sum() * 1e3 if decode.size and decode.sum() > 0 else 0.0
        measured = waits_measured(steps)
        instrument = self.instrument_text(t, measured) if decode.size else ""
        f, s_, c, g, q, b = parts_of(step.timing)
        wall = f + s_ + c + g + q + b
        waiting = f"waiting for the GIL {g:.1f} + for a CPU core {q:.1f}"
        waiting = waiting if measured else UNMEASURED
        branch = runs_note(len(steps), branch_offset(self.controller))
        branch = f"{branch}\n" if branch else ""
        return (
            f"TTFT {ttft:.1f} ms · mean inter-token latency {itl:.1f} ms · "
            f"decode {rate:.1f} tokens/s{overall}\n{instrument}{branch}"
            f"step {step.index}: forward {f:.1f} + sample {s_:.1f} + capture {c:.1f} + "
            f"{waiting} + between {b:.1f} = {wall:.1f} ms"
        )

    @staticmethod
    def instrument_text(t: dict[str, np.ndarray], measured: bool = True) -> str:
        """Decode steps' mean: the model's own time and the waits, adding up to the mean
        inter-token latency; the gap between steps apart (it is in no step's latency)."""
        own = (t["forward"] + t["sample"] + t["capture"])[1:].mean()
        itl = t["total_ms"][1:].mean()
        between = f"{t['between'][1:].mean():.1f} ms between steps"
        if not measured:
            return (
                f"decode steps, mean: forward + sample + capture {own:.1f} ms a step "
                f"({UNMEASURED}) · {between}\n"
            )
        return (
            f"decode steps, mean: the model's own {own:.1f} ms + waiting for the GIL "
            f"{t['blocked'][1:].mean():.1f} ms + for a CPU core {t['queued'][1:].mean():.1f} ms "
            f"= {itl:.1f} ms a step · {between}\n"
        )

    def explanation(self, steps: Sequence[Any]) -> str:
        """Why the first token is slow, in this run's own numbers (the same TTFT and mean
        inter-token latency as the line above and the card)."""
        pre = steps[0]
        n, first = pre.kv.tokens, pre.timing.total_ms
        if pre.logits.size == 0 and pre.approximate:  # a served run: the stream's waits only
            return served_explanation(steps)
        text = (
            f"The prefill read {n} prompt tokens in {first:.1f} ms "
            f"({n / first if first > 0 else float('nan'):.2f} tokens/ms, all positions in "
            "parallel)."
        )
        if len(steps) < 2:
            return text
        step_ms = float(np.mean([s.timing.total_ms for s in steps[1:]]))
        cached = steps[-1].kv.tokens - 1
        per_token = first / n if n else float("nan")
        return (
            text
            + (
                f" Each decode step reads 1 token and the cache of up to {cached} tokens: "
                f"{step_ms:.1f} ms (mean inter-token latency). The first token is slow because the "
                "whole prompt must pass through every layer before anything can be sampled; after "
                "that the cached keys and values are reused, so a step costs one token's work "
                f"({step_ms:.1f} ms for one token vs {per_token:.2f} ms per token in the parallel "
                "prefill)."
            )
            + (waiting_note(timings(steps)) if waits_measured(steps) else "")
        )

    # ----------------------------------------------------------------- interaction
    def _select_at(self, x: float) -> None:
        if self.controller.steps:
            self.controller.request_select(int(round(x)))

    def _on_clicked(self, event: Any) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        pos = event.scenePos()
        if self.plot.vb.sceneBoundingRect().contains(pos):
            self._select_at(self.plot.vb.mapSceneToView(pos).x())

    def _on_marker_moved(self, line: Any) -> None:
        """Select the step nearest the dropped marker, then snap the marker onto it."""
        self._select_at(line.value())
        step = self.controller.current_step()
        if step is not None:
            line.blockSignals(True)
            line.setValue(step.index)
            line.blockSignals(False)

    # ----------------------------------------------------------------- its story
    def explainer(self) -> ex.Explainer | None:
        ctl = self.controller
        return ex.timing_card(ctl.steps, len(ctl.prompt)) if ctl.prompt is not None else None

    # ----------------------------------------------------------------- export
    def plot_items(self) -> list[Any]:
        return [self.plot]

    def csv_table(self) -> tuple[Sequence[str], Sequence[Sequence[Any]]]:
        header = (
            "step",
            "forward_ms",
            "sample_ms",
            "capture_ms",
            "total_ms",
            "gil_wait_ms",
            "core_wait_ms",
            "between_ms",
            "wall_ms",
        )
        rows = [
            (
                s.index,
                s.timing.forward_ms,
                s.timing.sample_ms,
                s.timing.capture_ms,
                s.timing.total_ms,
                s.timing.blocked_ms if s.timing.waits_measured else "",  # not 0: not measured
                s.timing.queue_ms if s.timing.waits_measured else "",
                s.timing.between_ms,
                s.timing.wall_ms,
            )
            for s in self.controller.steps
        ]
        return header, rows


def served_explanation(steps: Sequence[Any]) -> str:
    """What a served run's bars are: the stream's waits, not the model's stages."""
    first = steps[0].timing.total_ms
    text = (
        f"Served: step 0's bar is the time to first token ({first:.1f} ms: the request, the "
        "server's queue and its prefill); each later bar is the wait for that token's chunk "
        "(the server's decode and the network). The server does not say how its time splits "
        "into prefill, forward or sampling."
    )
    if len(steps) > 1:
        step_ms = float(np.mean([s.timing.total_ms for s in steps[1:]]))
        text += f" Mean inter-token latency {step_ms:.1f} ms."
    return text
