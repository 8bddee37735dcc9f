"""Sampling pane: the settings for the next run, and what they do to the selected step right now.

Changing a control sends the settings to the controller (they apply to the next Run) and re-runs
the recorded step's raw logits through every active stage on the GUI thread, without the model
(with the run's own settings the loop's recorded stages are shown as they are):
one bar plot per stage, all over the same tokens (the raw top 15), so you can watch repetition
penalty, temperature, top-k, top-p and min-p reshape and cut the distribution.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import (
    QLabel,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core import cards as ex
from llm_lens.core.errors import SamplingError
from llm_lens.core.records import StepRecord
from llm_lens.core.sampling import STAGE_ORDER, SamplingParams
from llm_lens.desktop.panes.sampling.controls import SamplingControls
from llm_lens.desktop.panes.sampling.stages import SHOW, StageView, recorded_views, stage_views
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.bars import BAR_BRUSH, CHOSEN_BRUSH, horizontal_bars, tick_label
from llm_lens.desktop.widgets.pane import HoverTarget, Pane, plain_axis, steady_axes
from llm_lens.desktop.widgets.whatif_mark import CLEAN_BRUSH, WhatIfMark

STAGES = ("raw", *STAGE_ORDER)
STAGED_KEPT = 64  # staged steps kept (a few KB each)

SHORT = {
    "repetition_penalty": "rep. penalty",
    "temperature": "temperature",
    "top_k": "top-k",
    "top_p": "top-p",
    "min_p": "min-p",
}
ERROR_STYLE = "color: #d62728; font-weight: bold"
NOTE = (
    "Settings apply to the next Run. The plots re-sample the selected "
    "step now, from its recorded logits, without the model."
)
NOTE_LIVE = (
    "Settings apply to the next Run. While a run streams, the plots show its own stages; "
    "these settings re-sample the selected step when it ends."
)


class SamplingPane(Pane):
    """Sampling settings, and the selected step's distribution through each active stage."""

    title = "Sampling"
    empty_text = (
        "How temperature, top-k and top-p reshape the probabilities before one token is "
        "drawn. Run a prompt (Ctrl+Enter) to see it."
    )
    card_follows_params = True
    capability = "alternatives"  # a tokens-only served run has none: the note says so
    live_interval_ms = 150  # three plots

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(controller, parent)
        self.controls = SamplingControls()
        self.note = QLabel(NOTE)
        self.note.setWordWrap(True)
        self.error = QLabel()
        self.error.setStyleSheet(ERROR_STYLE)
        self.error.setWordWrap(True)
        self.error.hide()
        self.glw = pg.GraphicsLayoutWidget()
        self.plots: dict[str, pg.PlotItem] = {}
        self.bars: dict[str, pg.BarGraphItem] = {}
        self.stats: dict[str, pg.TextItem] = {}
        self.clean_bars: dict[str, pg.BarGraphItem] = {}  # What if? the clean run's, thin
        self.clean_views: list[StageView] = []  # as drawn (tests read them)
        self.whatif_mark = WhatIfMark()
        for name in STAGES:
            self._make_plot(name)
        layout = QVBoxLayout(self)
        for widget in (self.controls, self.whatif_mark, self.note, self.error):
            layout.addWidget(widget)
        layout.addWidget(self.glw, 1)
        self.params: SamplingParams = controller.params
        self.shown_params: SamplingParams = self.params  # the settings of the stages shown
        self.views: list[StageView] = []
        self.draw: Any = None  # the draw its card replays for the stages shown
        self._placed: tuple[str, ...] = ()
        self._step: StepRecord | None = None
        self._key: tuple[Any, ...] | None = None
        self._staged: dict[tuple[Any, ...], list[StageView]] = {}  # oldest first
        self.controls.reflect(self.params)
        self.controls.sig_edited.connect(self._on_edited)
        controller.sig_params_changed.connect(self._on_params_changed)
        self.clear()

    def _make_plot(self, name: str) -> None:
        plot = pg.PlotItem()
        plot.invertY(True)
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        plot.setMenuEnabled(False)
        plot.showGrid(x=True, alpha=0.25)
        plain_axis(plot.getAxis("bottom"))
        steady_axes(plot)
        bars = horizontal_bars(SHOW)
        plot.addItem(bars)
        zeros = np.zeros(SHOW)
        clean = pg.BarGraphItem(
            x0=zeros, y=np.arange(SHOW), width=zeros, height=0.18, brush=CLEAN_BRUSH, pen=None
        )
        plot.addItem(clean)
        self.clean_bars[name] = clean
        plot.setTitle(f"<b>{SHORT.get(name, name)}</b>", size="9pt")
        stats = pg.TextItem(anchor=(1, 1), color=(230, 230, 230))
        plot.addItem(stats)
        if name != "raw":
            raw = self.plots["raw"]
            plot.getAxis("left").setStyle(showValues=False)
            plot.getAxis("left").setWidth(4)
            plot.setXLink(raw)
            plot.setYLink(raw)
        self.plots[name], self.bars[name], self.stats[name] = plot, bars, stats

    def _place(self, names: tuple[str, ...]) -> None:
        """Show one plot per active stage, left to right in the order they apply."""
        if names == self._placed:
            return
        for name in self._placed:
            self.glw.removeItem(self.plots[name])
        grid = self.glw.ci.layout
        for col, name in enumerate(names):
            self.glw.addItem(self.plots[name], row=0, col=col)
            grid.setColumnStretchFactor(col, 1)
            grid.setColumnPreferredWidth(col, 190 if col == 0 else 80)
        self._placed = names

    # ----------------------------------------------------------------- rendering
    def render(self, step: StepRecord | None) -> None:
        if step is None:
            self.clear()
            return
        params = self._live_params()
        key = (step.run_id, step.index, params)
        if key == self._key:
            return
        self.shown_params = params
        self._key, self._step = key, step
        self.views = self._staged.pop(key, None) or self._stage(step)
        self._staged[key] = self.views  # scrubbing back to a step does not re-stage it (~10 ms)
        while len(self._staged) > STAGED_KEPT:
            self._staged.pop(next(iter(self._staged)))
        self._place(tuple(v.name for v in self.views))
        self._note_tail(step)
        n = min(SHOW, len(step.top_ids))
        chosen = [step.rank] if step.token.id < 0 else [  # a server naming tokens by text
            i for i in range(n) if step.top_ids[i] == step.token.id]  # fmt: skip
        brushes = [CHOSEN_BRUSH if i in chosen else BAR_BRUSH for i in range(n)]
        for view in self.views:
            self.bars[view.name].setOpts(
                x0=np.zeros(n), y=np.arange(n), width=view.probs[:n], height=0.75, brushes=brushes
            )
            self.stats[view.name].setHtml(self._stage_text(view))
        self._render_clean(step, n, chosen)
        raw = self.plots["raw"]
        raw.getAxis("left").setTicks(
            [[(i, tick_label(i + 1, step.top_texts[i])) for i in range(n)], []]
        )
        top = max(float(v.probs.max()) for v in (*self.views, *self.clean_views))
        raw.setXRange(0, max(top, 1e-6) * 1.05, padding=0)
        raw.setYRange(-0.6, n - 0.4, padding=0)
        for view in self.views:
            self.stats[view.name].setPos(max(top, 1e-6) * 1.05, n - 0.4)

    def _render_clean(self, step: StepRecord, n: int, chosen: list[int]) -> None:
        """What if? The clean run's probabilities of the same tokens after each stage, as a
        thin white bar in each (its logits of the same context, staged with these settings),
        and the mark's line: the chosen token's probability in each run."""
        clean = self.clean_step(step)
        self.clean_views = (
            [] if clean is None else stage_views(step, self.shown_params, clean.logits)
        )
        by_name = {v.name: v for v in self.clean_views}
        for name, bars in self.clean_bars.items():
            probs = by_name[name].probs[:n] if name in by_name else np.zeros(n)
            bars.setOpts(x0=np.zeros(n), y=np.arange(n), width=probs)
        self.whatif_mark.show_run(self.controller.interventions, self._difference(clean, chosen))

    def _difference(self, clean: Any, chosen: list[int]) -> str:
        if clean is None or not self.clean_views:
            return "no clean run read this context (run the prompt without changes to compare)"
        i = chosen[0] if chosen else None
        if i is None:
            return "white lines: the clean run's probabilities of the same tokens"
        ours, theirs = self.views[-1].probs[i], self.clean_views[-1].probs[i]
        return (
            f"white lines: the clean run's probabilities; the chosen token: p = {ours:.3g} "
            f"here, {theirs:.3g} in the clean run (after the last stage)"
        )

    def _live_params(self) -> SamplingParams:
        """The settings to stage with: these controls', or the run's own while a run streams.

        Re-staging 49,152 logits with other settings is torch work on the GUI thread (a sort
        for top-p, a draw for the card) beside the model's; the run's own stages are recorded.
        When the run ends the pane renders again with these settings."""
        return self.controller.run_params if self.controller.busy else self.params

    def _note_tail(self, step: StepRecord) -> None:
        """Say when the plots show the run's own stages while it streams, or are re-staged
        from a session's compact logits (approximate); set only when the text changes."""
        params = self.shown_params
        recorded = params == self.controller.run_params and (
            recorded_views(step, params) is not None
        )
        note = NOTE if params == self.params else NOTE_LIVE
        if step.approximate:  # how to get exact stages is the engine's to say
            why = self.controller.why_not("distribution") or "open the model locally for them"
            note = (
                f"Approximate: this run brought back {len(step.top_ids):,} alternatives, not "
                f"the whole distribution. {why[:1].upper()}{why[1:]}."
            )
        elif step.tail_levels and not recorded:
            note = (
                f"Re-staged from a session file: the most likely tokens and the context keep "
                f"their own logits, but {step.tail_levels:,} tail tokens share their bin's "
                "level, so these probabilities are approximate (exact at the run's own "
                "settings)."
            )
        if self.note.text() != note:  # a new text re-lays out the pane
            self.note.setText(note)

    def _stage(self, step: StepRecord) -> list[StageView]:
        """The run's own stages when these are its settings (no work here), else re-staged."""
        params = self.shown_params
        if params == self.controller.run_params:
            views = recorded_views(step, params)
            if views is not None:
                return views
        return stage_views(step, params)

    def _stage_text(self, view: StageView) -> str:
        """Kept-token count and the mass this stage removed, small enough for a narrow plot."""
        kept = f"{view.kept:,}" if view.kept < 10_000 else f"{view.kept / 1000:.1f}k"
        cut = "" if view.name == "raw" else f"<br>cut {view.removed_mass:.1%}"
        return f"<span style='font-size:8pt'>kept {kept}{cut}</span>"

    def clear(self) -> None:
        self._step, self._key, self.views = None, None, []
        self._staged.clear()  # (run id, index) is unique within one shown run only
        # the settings' stages stay placed: placing them again when the next step renders
        # re-laid out the plots, the longest unit at a run's end
        self._place(("raw", *self.params.active_stages()))
        zeros = np.zeros(SHOW)
        for bars in (*self.bars.values(), *self.clean_bars.values()):
            bars.setOpts(x0=zeros, y=np.arange(SHOW), width=zeros)
        self.clean_views = []
        self.whatif_mark.show_run(())
        self.shown_params = self.params
        for stats in self.stats.values():
            stats.setText("")
        self.stats["raw"].setText("no step selected")
        raw = self.plots["raw"]
        raw.getAxis("left").setTicks([[], []])
        raw.setXRange(0.0, 1.0, padding=0)  # not a zero-width range ("2e-235" ticks)
        raw.setYRange(-0.6, SHOW - 0.4, padding=0)
        self.stats["raw"].setPos(1.0, SHOW - 0.4)

    # ----------------------------------------------------------------- settings
    def _on_edited(self) -> None:
        """Validate; send valid settings to the controller and redraw the stages at once."""
        try:
            params = self.controls.read()
        except SamplingError as exc:
            self._set_error(str(exc))
            return
        self._set_error("")
        self.params = params
        # the stages first: the controller's signal refreshes the card, which reads them (the
        # other order left the card one change behind the controls and the plots)
        self.render(self.controller.current_step())
        self.controller.request_params(params)

    def _on_params_changed(self, params: SamplingParams) -> None:
        if params == self.params:
            return
        self.params = params
        self.controls.reflect(params)
        self._set_error("")
        self.schedule()

    def _set_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(bool(message))

    # ----------------------------------------------------------------- its story
    def bar_text(self, stage: str, y: float) -> str:
        """A bar of one stage: the raw token, its logit and raw probability, and after it."""
        step, row = self._step, int(round(y))
        view = next((v for v in self.views if v.name == stage), None)
        if step is None or view is None or not 0 <= row < len(view.probs):
            return ""
        return (
            f"rank {row + 1}: {step.top_texts[row]!r} id {int(step.top_ids[row])} · "
            f"logit {float(step.top_logits[row]):.3f} · raw probability "
            f"{float(step.top_probs[row]):.4%} · after {stage}: {float(view.probs[row]):.4%}"
        )

    def hover_targets(self) -> list[HoverTarget]:
        return [
            HoverTarget(plot, lambda x, y, n=name: self.bar_text(n, y), self.glw.scene())
            for name, plot in self.plots.items()
        ]

    def explainer(self) -> ex.Explainer | None:
        """The card of the stages shown; it also keeps the draw it replays (:attr:`draw`)."""
        step = self.controller.current_step()
        if step is None:
            return None
        params = self.shown_params
        explainer, self.draw = ex.sampling_card(step, params, params == self.controller.run_params)
        return explainer

    # ----------------------------------------------------------------- export
    def plot_items(self) -> list[Any]:
        return [self.glw.scene()]

    def svg_widget(self) -> QWidget:
        return self.glw

    def csv_table(self) -> tuple[list[str], list[list[Any]]]:
        header = ["stage", "rank", "id", "text", "prob", "removed_mass"]
        step = self._step
        if step is None:
            return header, []
        return header, [
            [
                v.name,
                r + 1,
                int(step.top_ids[r]),
                step.top_texts[r],
                float(v.probs[r]),
                v.removed_mass,
            ]
            for v in self.views
            for r in range(len(v.probs))
        ]
