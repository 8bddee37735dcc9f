"""What if? in a pane: the line that says the shown run was intervened (what it changed, and the
pane's own difference from the clean run), and the look of the clean run's marks in plots.

The status bar names the interventions of the run shown; a pane read on its own (a screenshot, a
detached dock) must say so too, and say what changed *there*: the Timing pane the intervened
run's own time beside the clean run's, the Sampling pane the clean run's probabilities, the
Experts pane the routing that moved. Hidden for a clean run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from llm_lens.desktop.state.whatif import CLEAN_STEPS, mark_text

MARK_STYLE = "QLabel { background: #5a2d82; color: white; padding: 1px 4px; }"  # status bar's
CLEAN_BRUSH = pg.mkBrush(255, 255, 255, 200)  # the clean run's bar: a thin line in each bar
CLEAN_PEN = pg.mkPen(255, 204, 128, 230, width=2, style=Qt.PenStyle.DashLine)  # its frames
TIP = (
    "The run shown was made with these What-if changes; the rest of the line is what they "
    "changed in this pane, against a clean run of the same prompt where one was made"
)


class WhatIfMark(QLabel):
    """A pane's What-if line: hidden for a clean run; for an intervened one 'intervened: …'
    and, after a '·', the pane's difference from the clean run (``show_run``)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
        self.setStyleSheet(MARK_STYLE)
        self.setToolTip(TIP)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setVisible(False)

    def show_run(self, interventions: Any, difference: str = "") -> None:
        """Mark a run made under ``interventions`` (none: hide) with the pane's ``difference``."""
        text = mark_text(interventions)
        if difference and text:
            text = f"{text} · {difference}"
        if text != self.text():
            self.setText(text)
        self.setVisible(bool(text))


def clean_steps(pane: Any, steps: Sequence[Any]) -> list[Any]:
    """The clean run's copy of each of ``steps`` (None where no clean run read that context, or
    past the first ``CLEAN_STEPS`` a clean run keeps); all None for a clean run
    (``Pane.clean_step``)."""
    if not pane.controller.interventions:
        return [None] * len(steps)
    return [pane.clean_step(s) if s.index < CLEAN_STEPS else None for s in steps]


def routing_changes(routing: Any, clean: Any) -> tuple[int, int]:
    """(choices that differ, choices) between two routings of the same positions: per MoE
    layer and position, the set of experts chosen, compared as sets (the order is the
    router's ranking, which the same set may reorder)."""
    ours = np.sort(np.asarray(routing.experts), axis=-1)  # (layers, rows, k)
    theirs = np.sort(np.asarray(clean.experts), axis=-1)
    if ours.shape != theirs.shape:
        return 0, 0
    moved = np.any(ours != theirs, axis=-1)  # (layers, rows)
    return int(moved.sum()), int(moved.size)


def time_difference(step: Any, clean: Any) -> str:
    """The Timing pane's difference: this intervened step's time against the clean run's."""
    if clean is None or clean.timing is None:
        return (
            "the bars time this intervened run (its hooks included); no clean run read this context"
        )
    ours, theirs = step.timing.wall_ms, clean.timing.wall_ms
    return (
        f"step {step.index} took {ours:.1f} ms, the clean run's {theirs:.1f} ms "
        f"({ours - theirs:+.1f} ms; white ticks: the clean run)"
    )


def lost_choices(row: Any, clean_row: Any) -> tuple[np.ndarray, np.ndarray]:
    """Cells (expert + 0.5, layer row + 0.5) of the experts a clean one-row routing chose that
    ``row`` (the intervened run's, same token) did not: where the routing moved away from."""
    ours, theirs = np.asarray(row.experts[:, 0]), np.asarray(clean_row.experts[:, 0])  # (L, k)
    cells = [(e, r) for r in range(theirs.shape[0]) for e in theirs[r] if e not in ours[r]]
    xs = np.array([e + 0.5 for e, _ in cells], np.float64)
    return xs, np.array([r + 0.5 for _, r in cells], np.float64)


def routing_difference(step: Any, clean: Any, row: Any, position: int) -> tuple[str, Any]:
    """The Experts pane's difference for the token at ``position`` (read by ``step``; ``row``
    its intervened routing): (the mark's text, the clean run's row of it or None)."""
    if clean is None or clean.routing is None or step is None or step.routing is None:
        return "no clean run read this context (run the prompt without changes to compare)", None
    r = clean.routing
    clean_row = r.row(position - r.first_position)
    moved, total = routing_changes(step.routing, r)
    lost = len(lost_choices(row, clean_row)[0])
    return (
        f"dashed: the clean run's choices this run did not make for this token ({lost}); the "
        f"forward that read it routed {moved} of {total} layer × token choices differently",
        clean_row,
    )
