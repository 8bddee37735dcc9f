"""The sweep maps draw a ``SweepMap`` as given (no model: the sweep's numbers are tested against
core in tests/desktop/state/test_sweep.py): the colours are each cell's share of the gap on a
scale symmetric about 0, the position axis carries the tokens ("clean→corrupted" where they
differ), a blank head row takes no click, CSV has one row a cell, and a cleared map says
nothing."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np

from llm_lens.core.interventions.sweep import Metric, SweepResult
from llm_lens.desktop.panes.sweep.maps import SweepMaps
from llm_lens.desktop.state.sweep import SweepAsk, SweepMap


def _sweep() -> SweepMap:
    residual = np.array([[0.0, 1.0, 3.0], [0.5, -2.0, 1.0]])  # clean 3, corrupt 1: a gap of 2
    heads = np.array([[math.nan, math.nan], [1.5, 2.5]])  # layer 0 has no attention
    result = SweepResult(Metric(5, 6), 3.0, 1.0, residual, heads)
    ask = SweepAsk("a b c", "a x c")
    return SweepMap(ask, result, ("a", " b", " c"), ("a", " x", " c"), "logit diff", 0.5)


def test_the_maps_draw_the_sweep_as_given(qtbot: Any, tmp_path: Path) -> None:
    maps = SweepMaps()
    qtbot.addWidget(maps)
    maps.show_sweep(_sweep())
    np.testing.assert_allclose(
        maps.images["residual"].image, [[-0.5, 0.0, 1.0], [-0.25, -1.5, 0.0]]
    )
    assert maps.bar.levels() == (-1.5, 1.5)  # symmetric about 0, wide enough for -1.5
    ticks = maps.plots["residual"].getAxis("bottom")._tickLevels[0]
    assert [t for _, t in ticks] == ["a", "·b→·x", "·c"]
    assert "layer 0 has no attention heads" in maps.cell_text("heads", 0, 1)
    assert "restores 75% of the gap" in maps.cell_text("heads", 1, 1)
    clicked: list[tuple[str, int, int]] = []
    maps.sig_cell_clicked.connect(lambda *c: clicked.append(c))
    maps.images["heads"].sig_clicked.emit(0.5, 1.5)  # the blank row
    maps.images["residual"].sig_clicked.emit(1.2, 2.7)
    maps.images["residual"].sig_clicked.emit(2.5, 0.5)  # outside
    assert clicked == [("residual", 1, 2)]
    maps.export(tmp_path / "m.csv")
    with (tmp_path / "m.csv").open(encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["map", "layer", "index", "token", "metric", "restored"]
    assert rows[1:4] == [
        ["residual", "0", "0", "a", "0.0", "-0.5"],
        ["residual", "0", "1", " b", "1.0", "0.0"],
        ["residual", "0", "2", " c", "3.0", "1.0"],
    ]
    assert rows[7] == ["heads", "0", "0", "", "", ""] and len(rows) == 1 + 6 + 4
    maps.clear()
    assert maps.cell_text("residual", 0, 0) == "" and maps.csv_table()[1] == []
