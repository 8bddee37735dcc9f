"""CSV exports neutralise what a spreadsheet would run as a formula (OWASP "CSV injection")."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest

from llm_lens.core.exports.table import safe_cell, write_csv
from llm_lens.core.fileio import PathError


@pytest.mark.parametrize(
    "text", ["=1+2", "+SUM(A1)", "-2+3", "@cmd", "\t=x", "\r=x", '=HYPERLINK("x")', "＝1"]
)
def test_formula_starts_get_a_quote(text):
    assert safe_cell(text) == "'" + text


@pytest.mark.parametrize("value", [-0.25, 3, -7, np.float32(-1.5), np.int64(-2), 0.0])
def test_numbers_stay_numbers(value):
    assert safe_cell(value) is value


@pytest.mark.parametrize("text", ["hello", " =x", "a=b", "", "'quoted", "1e5"])
def test_plain_text_is_unchanged(text):
    assert safe_cell(text) == text


def test_write_csv_reads_back_as_data(tmp_path):
    path = tmp_path / "pane.csv"
    rows = [["=cmd|' /C calc'!A0", -0.5, 3], ["@SUM(1)", np.float32(0.25), "-"], ["ok", 1e-3, 7]]
    write_csv(path, ["token", "prob", "rank"], rows)
    with open(path, newline="", encoding="utf-8") as f:
        back = list(csv.reader(f))
    assert back[0] == ["token", "prob", "rank"]
    assert back[1] == ["'=cmd|' /C calc'!A0", "-0.5", "3"]  # the number keeps its minus sign
    assert back[2] == ["'@SUM(1)", "0.25", "'-"]
    assert back[3] == ["ok", "0.001", "7"]
    assert [p.name for p in tmp_path.iterdir()] == ["pane.csv"]  # no temporary file left


def test_write_csv_is_atomic_and_refuses_devices(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("previous")
    with pytest.raises(PathError, match="not a regular file"):
        write_csv(os.devnull, ["a"], [[1]])

    def broken_rows():
        yield ["fine"]
        raise OSError(28, "No space left on device")

    with pytest.raises(PathError):
        write_csv(path, ["a"], broken_rows())
    assert path.read_text() == "previous"  # a failed write never destroys the old file
