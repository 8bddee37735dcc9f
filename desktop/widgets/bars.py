"""Horizontal probability bars with token labels, as the Logits and Sampling panes draw them."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg

from llm_lens.desktop.widgets.token_text import visible

BAR_BRUSH = pg.mkBrush(90, 140, 220)
CHOSEN_BRUSH = pg.mkBrush(245, 150, 40)
LABEL_CHARS = 16


def tick_label(rank: int, text: str) -> str:
    """'3. ·the' — rank (1-based) and visible text, shortened to stay on the axis."""
    shown = visible(text)
    if len(shown) > LABEL_CHARS:
        shown = shown[: LABEL_CHARS - 1] + "…"
    return f"{rank}. {shown}"


def bar_values(probs: np.ndarray, log: bool) -> tuple[np.ndarray, float]:
    """Bar ends and the common baseline: (probs, 0), or (log10 probs, a floor below them)."""
    if not log:
        return probs.astype(np.float64), 0.0
    values = np.log10(np.maximum(probs.astype(np.float64), 1e-30))
    return values, float(math.floor(values.min()) - 0.5)


def horizontal_bars(n: int) -> pg.BarGraphItem:
    """``n`` horizontal bars at rows 0…n−1, all of width 0, built once and later resized."""
    zeros = np.zeros(n)
    return pg.BarGraphItem(
        x0=zeros, y=np.arange(n), width=zeros, height=0.75, brushes=[BAR_BRUSH] * n, pen=None
    )
