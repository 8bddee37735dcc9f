"""Helpers the pane tests share: show a pane, select and render a step, read a curve, and check
a pane's exports (CSV header and rows, PNG, SVG) against what it shows."""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtGui import QImage


def show(qtbot: Any, pane: Any) -> Any:
    """The pane shown at 700×450, exposed, with its controller's current step rendered."""
    qtbot.addWidget(pane)
    pane.resize(700, 450)
    pane.show()
    qtbot.waitExposed(pane)
    pane.render(pane.controller.current_step())
    return pane


def render_step(pane: Any, controller: Any, index: int) -> None:
    """Select step ``index`` on the controller, as a click would, and render it in ``pane``."""
    controller.request_select(index)
    pane.render(controller.steps[index])


def curve(item: Any) -> tuple[np.ndarray, np.ndarray]:
    """A plot item's (x, y) data as arrays; empty arrays where it has none."""
    x, y = item.getData()  # (None, None) when empty
    return np.asarray(x if x is not None else []), np.asarray(y if y is not None else [])


def check_exports(
    pane: Any,
    tmp_path: Path,
    rows: int,
    header: Sequence[str] | None = None,
    svg: bool = False,
) -> list[list[str]]:
    """The pane's CSV has ``header`` (by default the first row of ``pane.csv_table()``) and
    ``rows`` data rows; its PNG loads in QImage; with ``svg``, its SVG parses as SVG.

    Returns the CSV's data rows (the header left out)."""
    pane.export_csv(tmp_path / "t.csv")
    with open(tmp_path / "t.csv", newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    expected = pane.csv_table()[0] if header is None else header
    assert tuple(table[0]) == tuple(expected)
    assert len(table) == rows + 1
    pane.export_image(tmp_path / "t.png")
    assert not QImage(str(tmp_path / "t.png")).isNull()
    if svg:
        pane.export_image(tmp_path / "t.svg")
        assert ET.parse(tmp_path / "t.svg").getroot().tag.endswith("svg")
    return table[1:]


def check_svg_exports(qtbot: Any, controller: Any, tmp_path: Path, panes: Iterable[type]) -> None:
    """Each pane class, rendered on the controller's current step, exports an SVG that parses."""
    for cls in panes:
        pane = cls(controller)
        qtbot.addWidget(pane)
        pane.render(controller.current_step())
        path = tmp_path / f"{cls.__name__}.svg"
        pane.export_image(path)
        assert ET.parse(path).getroot().tag.endswith("svg")
