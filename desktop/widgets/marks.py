"""What every pane's selection marks share: the pen and the outline of a cell."""

from __future__ import annotations

import pyqtgraph as pg

MARK_PEN = pg.mkPen("#ff4081", width=2)


def rect_xy(x0: float, y0: float, x1: float, y1: float) -> tuple[list[float], list[float]]:
    """The closed outline of the rectangle (x0, y0)–(x1, y1), as a line item's xs and ys."""
    return [x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0]
