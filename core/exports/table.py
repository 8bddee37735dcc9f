"""A pane's table as CSV, safe to open in a spreadsheet.

Token texts and prompts are the user's and the model's words: a cell that begins with ``=``,
``+``, ``-``, ``@``, a tab or a carriage return is run as a formula by Excel, LibreOffice and
Google Sheets ("CSV injection", OWASP). Such a text cell is written with a single quote before
it, which the spreadsheet shows as text; numbers stay numbers (``-0.25`` is a number).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence
from numbers import Number
from pathlib import Path
from typing import Any

from llm_lens.core.fileio import atomic_write

# OWASP's list, and the full-width forms some spreadsheets also read as a formula's start
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def safe_cell(value: Any) -> Any:
    """``value`` as a spreadsheet will read it as data: a number as it is, any other value's
    text with a single quote before it when it would start a formula."""
    if isinstance(value, Number) and not isinstance(value, bool):
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def safe_row(row: Iterable[Any]) -> list[Any]:
    return [safe_cell(v) for v in row]


def write_csv(
    path: str | os.PathLike[str], header: Sequence[Any], rows: Iterable[Sequence[Any]]
) -> Path:
    """Write ``header`` and ``rows`` as CSV (UTF-8) atomically, each cell through
    :func:`safe_cell`; returns the file written (a link's target when ``path`` is a link)."""

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(safe_row(header))
            w.writerows(safe_row(r) for r in rows)

    return atomic_write(path, write)
