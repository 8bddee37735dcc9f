"""Pane.export_csv: what a pane shows, written so that a spreadsheet runs none of it."""

from __future__ import annotations

import csv

import pytest

from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.pane import Pane


class _Table(Pane):
    title = "Table"

    def csv_table(self):
        return ["token", "p"], [["=1+1", 0.5], ["@SUM(A1)", -0.25], ["plain", 3]]


@pytest.fixture
def ctl(qtbot):
    controller = Controller()
    yield controller
    controller.shutdown()


def test_token_text_that_reads_as_a_formula_is_written_as_text(qtbot, ctl, tmp_path):
    pane = _Table(ctl)
    qtbot.addWidget(pane)
    pane.export_csv(tmp_path / "t.csv")
    with open(tmp_path / "t.csv", newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    assert table == [["token", "p"], ["'=1+1", "0.5"], ["'@SUM(A1)", "-0.25"], ["plain", "3"]]
