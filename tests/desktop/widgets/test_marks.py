"""desktop.widgets.marks: the pen and the cell outline every pane's selection mark uses."""

from __future__ import annotations

import pyqtgraph as pg

from llm_lens.desktop.widgets.marks import MARK_PEN, rect_xy


def test_a_rectangle_outline_is_closed_and_goes_round_its_corners():
    xs, ys = rect_xy(1.0, 2.0, 4.0, 6.0)
    assert list(zip(xs, ys, strict=True)) == [(1, 2), (4, 2), (4, 6), (1, 6), (1, 2)]


def test_the_outline_draws_as_a_line_item():
    item = pg.PlotDataItem(*rect_xy(0.0, 0.0, 2.0, 1.0), pen=MARK_PEN)
    x, y = item.getData()
    assert list(x) == [0, 2, 2, 0, 0] and list(y) == [0, 0, 1, 1, 0]
    assert MARK_PEN.width() == 2 and MARK_PEN.color().name() == "#ff4081"
