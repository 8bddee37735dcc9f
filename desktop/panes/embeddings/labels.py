"""How the Embeddings pane lays out and reads its plots: token names that never overlap, a range
that leaves the far-off paths out, and the point nearest the mouse."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg

MAX_LABELS = 60  # text labels drawn at once in either mode


class Labels:
    """A fixed pool of TextItems on one plot, placed greedily so that no two overlap.

    Points come in priority order; one that would overlap an earlier label stays unlabelled
    (its dot remains, and hovering names it). Zooming re-runs the placement.
    """

    def __init__(self, plot: Any) -> None:
        self.plot = plot
        self.points: list[tuple[Any, str]] = []
        self.items = [pg.TextItem(anchor=(0, 1), color=(235, 235, 235)) for _ in range(MAX_LABELS)]
        for item in self.items:
            item.setVisible(False)
            plot.addItem(item, ignoreBounds=True)
        plot.getViewBox().sigRangeChanged.connect(self.place)

    def set(self, points: Sequence[tuple[Any, str]]) -> None:
        self.points = list(points[: 3 * MAX_LABELS])
        self.place()

    def place(self, *_: object) -> None:
        pw, ph = self.plot.getViewBox().viewPixelSize()
        sized = np.isfinite(pw) and np.isfinite(ph) and pw > 0 and ph > 0
        boxes: list[tuple[float, float, float, float]] = []
        for xy, text in self.points:
            if len(boxes) == len(self.items):
                break
            if sized:
                x, y = float(xy[0]) / pw, float(xy[1]) / ph
                box = (x, y, x + 7 * len(text) + 6, y + 15)  # pixels: text above-right of xy
                if any(
                    box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
                    for b in boxes
                ):
                    continue
            else:
                box = (0.0, 0.0, 0.0, 0.0)
            item = self.items[len(boxes)]
            boxes.append(box)
            item.setText(text)
            item.setPos(float(xy[0]), float(xy[1]))
            item.setVisible(True)
        for item in self.items[len(boxes) :]:
            item.setVisible(False)


def distinct(ids: Iterable[int]) -> list[int]:
    """Ids in first-seen order, each once."""
    return list(dict.fromkeys(int(i) for i in ids))


def typical_range(
    coords: np.ndarray,
) -> tuple[tuple[float, float], tuple[float, float], list[int]]:
    """The corners of the typical layer paths (tokens, layers + 1, 2), and the far-off tokens
    left out: a sink token's residual can be ten times longer than the others', which would
    squeeze every other path into a corner."""
    centre = np.median(coords.reshape(-1, 2), axis=0)
    reach = np.linalg.norm(coords - centre, axis=-1).max(axis=1)  # (tokens,)
    far = reach > 5 * max(float(np.median(reach)), 1e-6)
    pts = coords[~far].reshape(-1, 2) if (~far).any() else coords.reshape(-1, 2)
    (x0, y0), (x1, y1) = pts.min(axis=0).tolist(), pts.max(axis=0).tolist()
    return (x0, y0), (x1, y1), [int(i) for i in np.flatnonzero(far)]


def nearest_point(
    coords: np.ndarray,
    first: Sequence[int],
    pixel: tuple[float, float],
    x: float,
    y: float,
    max_px: float,
) -> int | None:
    """The id of the point of ``coords`` nearest to (x, y) within ``max_px`` screen pixels
    (``pixel``: the view's size of one pixel), looking among the ids ``first`` before all."""
    pw, ph = pixel[0] or 1.0, pixel[1] or 1.0
    for pool in (np.array(first, np.int64), None):
        pts = coords if pool is None else coords[pool]
        if pts.shape[0] == 0:
            continue
        d2 = ((pts[:, 0] - x) / pw) ** 2 + ((pts[:, 1] - y) / ph) ** 2
        best = int(np.argmin(d2))
        if d2[best] <= max_px**2:
            return best if pool is None else int(pool[best])
    return None
