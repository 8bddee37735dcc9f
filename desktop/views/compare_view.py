"""Side-by-side sampling: 2–4 configurations (or K seeds of one) from one shared prefill.

Each column is its continuation as token chips coloured by the chosen token's probability, the
first divergence marked by a red bar; under the columns, the mean pairwise KL divergence and
overlap at every step: each column's text scored under every column's settings (solid), and the
distributions the columns sampled from, each on its own text (dashed). Clicking a chip selects
that step in every column; "show in panes" shows a column's run in the main window's panes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core.cards import p3
from llm_lens.core.errors import LensError
from llm_lens.core.sampling import MAX_CONFIGS as MAX_COLUMNS
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.scheduler import REPAINT_MS
from llm_lens.desktop.views.compare_columns import DIVERGE, ColumnWidget, column_header, error_label
from llm_lens.desktop.views.sampler_rows import SamplerRow

SAME_PEN = pg.mkPen("#3d7bd9", width=2)
OWN_PEN = pg.mkPen("#e37400", width=2, style=Qt.PenStyle.DashLine)
CURVES_NOTE = (
    "solid: the same text scored under each column's settings (what the settings alone "
    "change; 0 for K samples of one setting) · dashed: each column's own distribution on its own "
    "text (equal to solid up to the first divergence, red dotted line; after it, how far the "
    "texts have led the model apart) · mean over pairs of columns, one point per step"
)
KL_TITLE = "mean pairwise KL divergence"
MODES = ("side by side: 2–4 configurations", "same settings, K samples (seeds s … s+K−1)")


class CompareView(QWidget):
    """The comparison view (a dock of the main window). Requests go through
    ``controller.compare``; ``prompt_source()`` gives the editor's (text, chat mode)."""

    title = "Compare"

    def __init__(
        self,
        controller: Controller,
        prompt_source: Callable[[], tuple[str, bool]],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller, self.compare = controller, controller.compare
        self.prompt_source = prompt_source
        self.rows: list[SamplerRow] = []
        self.columns: list[ColumnWidget] = []
        self.selected = -1
        self._flush = QTimer(self, singleShot=True, interval=REPAINT_MS)
        self._flush.timeout.connect(self._draw_new_steps)
        self._build()
        for preset in ("factual", "creative", "greedy"):
            self.add_row(preset)
        self._wire()
        if self.compare.start is not None:  # a comparison made (or reopened) before this view
            self._on_started(self.compare.start)
            self._draw_new_steps()
            if self.compare.outcome is not None:
                self._on_finished(self.compare.outcome)
        self._on_mode(0)

    # ----------------------------------------------------------------- building
    def _build(self) -> None:
        self.mode = QComboBox()
        self.mode.addItems(MODES)
        self.k_box = QSpinBox(minimum=0, maximum=99, value=4, prefix="K ")
        self.k_box.setToolTip("How many samples (2–16), seeds s … s+K−1 from the first row's seed")
        self.max_tokens = QSpinBox(minimum=1, maximum=1024, value=24, prefix="max ")
        self.max_tokens.setSuffix(" tokens")
        self.run_button, self.stop_button = QPushButton("Run"), QPushButton("Stop")
        top = QHBoxLayout()
        for w in (self.mode, self.k_box, self.max_tokens):
            top.addWidget(w)
        top.addStretch(1)
        top.addWidget(self.run_button)
        top.addWidget(self.stop_button)
        self.rows_box = QVBoxLayout()
        self.add_button = QPushButton("+ configuration")
        self.error = error_label()
        self.info = QLabel(
            "Run to compare: the prompt is read once, then each setting samples.", wordWrap=True
        )
        self.step_label = QLabel("click a token to select its step in every column", wordWrap=True)
        self.grid_host = QWidget()
        self.grid = QGridLayout(self.grid_host)
        self.grid.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(self.grid_host)
        content = QWidget()
        layout = QVBoxLayout(content)
        layout.addLayout(top)
        layout.addLayout(self.rows_box)
        layout.addWidget(self.add_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.error)
        layout.addWidget(self.info)
        layout.addWidget(self.step_label)
        layout.addWidget(scroll, 1)
        layout.addWidget(self._build_plots())
        self._fit_vertically(content)

    def _fit_vertically(self, content: QWidget) -> None:
        """``content`` scrolls up and down when wrapped configuration rows make it taller than
        the dock (four rows on a 720-pixel screen), never sideways: it keeps its minimum width."""
        outer = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        outer.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        outer.setWidget(content)
        bar = outer.verticalScrollBar().sizeHint().width()
        outer.setMinimumWidth(content.minimumSizeHint().width() + bar)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(outer)

    def _build_plots(self) -> QWidget:
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setFixedHeight(170)
        self.curves, self.own_curves, self.cursors, self.diverge_lines = [], [], [], []
        for i, (title, axis) in enumerate(
            ((KL_TITLE, "nats"), ("mean pairwise overlap", "Σ min(p, q)"))
        ):
            plot = self.plots.addPlot(row=0, col=i, title=title)
            plot.setLabel("left", axis)
            plot.setLabel("bottom", "step")
            plot.showGrid(x=True, y=True, alpha=0.3)
            self.curves.append(plot.plot([], [], pen=SAME_PEN, symbol="o", symbolSize=5,
                                         symbolBrush="#3d7bd9"))  # fmt: skip
            self.own_curves.append(plot.plot([], [], pen=OWN_PEN))
            diverge = pg.InfiniteLine(
                angle=90, movable=False, pen=pg.mkPen(DIVERGE, width=1, style=Qt.PenStyle.DotLine)
            )
            cursor = pg.InfiniteLine(angle=90, pen=pg.mkPen("#d93025", width=1), movable=False)
            for line in (diverge, cursor):
                line.setVisible(False)
                plot.addItem(line)
            self.cursors.append(cursor)
            self.diverge_lines.append(diverge)
        self.kl_plot, self.overlap_plot = self.plots.getItem(0, 0), self.plots.getItem(0, 1)
        for plot in (self.kl_plot, self.overlap_plot):
            plot.disableAutoRange()
        self.kl_plot.setYRange(0, 1, padding=0)
        self.overlap_plot.setYRange(0, 1.05, padding=0)
        self.curves_note = QLabel(CURVES_NOTE, wordWrap=True)
        box = QWidget()
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.plots)
        column.addWidget(self.curves_note)
        return box

    def _wire(self) -> None:
        c = self.compare
        self.mode.currentIndexChanged.connect(self._on_mode)
        self.add_button.clicked.connect(lambda: self.add_row("custom"))
        self.run_button.clicked.connect(self.run)
        self.stop_button.clicked.connect(c.request_stop)
        c.sig_compare_started.connect(self._on_started)
        c.sig_compare_step.connect(lambda *_: self._flush.start())
        c.sig_compare_finished.connect(self._on_finished)
        c.sig_error.connect(lambda view, msg: self.show_error(msg) if view == "compare" else None)
        self.controller.sig_busy_changed.connect(self._on_busy)
        self._on_busy(False)

    # ----------------------------------------------------------------- configurations
    def add_row(self, preset: str = "custom") -> SamplerRow | None:
        """Add a configuration row; a fifth one is refused with a message."""
        if len(self.rows) >= MAX_COLUMNS:
            self.show_error(f"at most {MAX_COLUMNS} configurations can be compared side by side")
            return None
        row = SamplerRow(len(self.rows) + 1, preset)
        row.sig_remove.connect(lambda: self._remove_row(row))
        row.sig_changed.connect(self.clear_error)
        self.rows.append(row)
        self.rows_box.addWidget(row)
        self._on_mode(self.mode.currentIndex())
        return row

    def _remove_row(self, row: SamplerRow) -> None:
        if len(self.rows) <= 1:
            return
        self.rows.remove(row)
        self.rows_box.removeWidget(row)
        row.deleteLater()
        for i, r in enumerate(self.rows):
            r.set_number(i + 1)
        self.clear_error()

    def samples_mode(self) -> bool:
        return self.mode.currentIndex() == 1

    def _on_mode(self, _index: int) -> None:
        samples = self.samples_mode()
        self.k_box.setVisible(samples)
        self.add_button.setVisible(not samples)
        for i, row in enumerate(self.rows):
            row.setVisible(i == 0 or not samples)
            row.remove.setVisible(not samples)
        self.clear_error()

    # ----------------------------------------------------------------- running
    def run(self) -> None:
        """Validate the settings (a message in red for a bad one), then ask for the run."""
        self.clear_error()
        rows = self.rows[:1] if self.samples_mode() else self.rows
        try:
            configs = [row.params() for row in rows]
        except LensError as exc:
            index = next(i for i, row in enumerate(rows) if _bad(row))
            self.show_error(f"configuration #{index + 1}: {exc}")
            return
        changes = self._changes(rows)
        if changes is None:
            return
        text, chat = self.prompt_source()
        if self.samples_mode():
            seed = int(rows[0].values()["seed"])
            k, n = self.k_box.value(), self.max_tokens.value()
            self.compare.request_samples(text, chat, configs[0], k, seed, n, changes[0])
        else:
            n = self.max_tokens.value()
            self.compare.request_compare(text, chat, configs, n, changes)

    def _changes(self, rows: list[SamplerRow]) -> list[tuple[Any, ...]] | None:
        """Each row's interventions: the What-if list's active ones where its box is ticked;
        None (and a message) when a ticked row would run with no change at all."""
        active = self.controller.whatif.active()
        if any(r.with_whatif() for r in rows) and not active:
            self.show_error("the What-if list has no change switched on: add one (right-click a "
                            "head, a layer or a token) or untick What-if")  # fmt: skip
            return None
        return [active if r.with_whatif() else () for r in rows]

    def _on_started(self, start: Any) -> None:
        self._clear_columns()
        samples = start.samples
        for i in range(len(start.params)):
            column = ColumnWidget(column_header(start, i), compact=samples)
            column.sig_step_clicked.connect(self.select_step)
            column.sig_show.connect(lambda i=i: self.compare.show_column(i, self.selected))
            self.grid.addWidget(column, i if samples else 0, 0 if samples else i)
            self.columns.append(column)
        where = getattr(start, "where", "")
        if where:  # a served comparison: no prefill to share
            self.info.setText(f"served by {where}: each column is its own request, all in "
                              "flight together (a server keeps no prefill to share)")  # fmt: skip
            return
        shared, saved = start.shared_prefill_ms, start.prefill_saved_ms
        own = sum(start.own_prefill)
        alone = f" · {own} column(s) read the prompt under their own changes" if own else ""
        self.info.setText(f"shared prefill: {shared:.0f} ms, saved {saved:.0f} ms{alone}")

    def _draw_new_steps(self) -> None:
        for column, records in zip(self.columns, self.compare.columns, strict=False):
            drawn = len(column.chips.chips)
            if len(records) > drawn:
                column.add_steps(records[drawn:])
        self._show_selection()

    def _on_finished(self, outcome: Any) -> None:
        self._flush.stop()
        self._draw_new_steps()
        errors = getattr(outcome, "errors", ()) or (None,) * len(outcome.columns)
        for column, stats, error in zip(self.columns, outcome.columns, errors, strict=True):
            column.stats.setText(
                f"{stats.length} tokens · {stats.tokens_per_s:.1f} tokens/s · "
                f"mean log-prob {stats.mean_logprob:.3f} · perplexity {stats.perplexity:.2f} · "
                f"finish: {stats.finish_reason}" + (f" · {error}" if error else "")
            )
            column.chips.set_divergence(-1 if outcome.divergence_step is None
                                        else outcome.divergence_step)  # fmt: skip
            column.show_button.setEnabled(True)
        d = outcome.divergence_step
        where = "never (within the shortest column)" if d is None else f"step {d}"
        self.info.setText(f"{self.info.text()} · first divergence: {where}")
        self.curves_note.setText(getattr(outcome, "curves_note", "") or CURVES_NOTE)
        self._plot(outcome)

    def _plot(self, outcome: Any) -> None:
        """KL and overlap at every step: teacher-forced (solid) and each column's own (dashed),
        with the first divergence marked."""
        same = (outcome.kl_per_step, outcome.overlap_per_step)
        own = (outcome.own_kl_per_step, outcome.own_overlap_per_step)
        for curves, series in ((self.curves, same), (self.own_curves, own)):
            for curve, values in zip(curves, series, strict=True):
                x = [i for i, v in enumerate(values) if math.isfinite(v)]
                curve.setData(x, [values[i] for i in x])
        steps = max((c.length for c in outcome.columns), default=1)
        for plot in (self.kl_plot, self.overlap_plot):
            plot.setXRange(-0.5, max(steps - 0.5, 0.5), padding=0)
        kls = [v for v in (*same[0], *own[0]) if math.isfinite(v)]
        top = max(max(kls) * 1.15, 0.05) if kls else 1.0
        self.kl_plot.setYRange(0, top, padding=0)
        self.kl_plot.setTitle(KL_TITLE if kls or not own[0] else f"{KL_TITLE}: none (see below)")
        d = outcome.divergence_step
        for line in self.diverge_lines:
            line.setVisible(d is not None)
            line.setValue(d or 0)

    # ----------------------------------------------------------------- selection
    def select_step(self, index: int) -> None:
        """Highlight step ``index`` in every column (and the plots), and describe it."""
        self.selected = index
        self._show_selection()

    def _show_selection(self) -> None:
        i = self.selected
        parts = []
        for n, (column, records) in enumerate(zip(self.columns, self.compare.columns,
                                                  strict=False)):  # fmt: skip
            column.chips.set_selection(i if i < len(records) else -1, -1)
            if 0 <= i < len(records):
                s = records[i]
                parts.append(f"#{n + 1} {s.token.text!r} p={p3(s.prob)}")
        for cursor in self.cursors:
            cursor.setVisible(i >= 0)
            cursor.setValue(max(i, 0))
        if i >= 0:
            self.step_label.setText(f"step {i}: " + " · ".join(parts))

    def _clear_columns(self) -> None:
        for column in self.columns:
            self.grid.removeWidget(column)
            column.deleteLater()
        self.columns, self.selected = [], -1
        for curve in (*self.curves, *self.own_curves):
            curve.setData([], [])
        for line in self.diverge_lines:
            line.setVisible(False)
        for cursor in self.cursors:
            cursor.setVisible(False)
        self.step_label.setText("click a token to select its step in every column")

    # ----------------------------------------------------------------- messages
    def show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(True)

    def clear_error(self) -> None:
        self.error.setVisible(False)

    def _on_busy(self, busy: bool) -> None:
        self.stop_button.setEnabled(busy)


def _bad(row: SamplerRow) -> bool:
    try:
        row.params()
    except LensError:
        return True
    return False
