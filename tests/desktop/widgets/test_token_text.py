"""desktop.widgets.token_text: one whitespace table, shown the same way in every pane."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llm_lens.core.records import TokenInfo
from llm_lens.desktop.panes.layers import shown
from llm_lens.desktop.widgets.bars import tick_label
from llm_lens.desktop.widgets.token_text import (
    WHITESPACE,
    piece_label,
    token_chip,
    visible,
    visible_text,
)

DESKTOP = Path(__file__).resolve().parents[3] / "desktop"


@pytest.mark.parametrize("char", [" ", "\n", "\t", "\r"])
def test_each_whitespace_character_is_shown_the_same_way_everywhere(char):
    mark = WHITESPACE[char]
    assert mark.strip() and mark != char  # a visible mark, not the character itself
    text = f"a{char}b"
    want = f"a{mark}b"
    info = TokenInfo(id=7, text=text, raw=text.encode())
    assert visible(text) == want  # chips, bar ticks, branch tables
    assert visible_text(text) == want  # axis labels (attention, positions, experts, ...)
    assert piece_label(text, text.encode()) == want  # a model token's chip
    assert piece_label(text, text.encode(), special=True) == want
    assert token_chip(info, "prompt token 0").label == want
    assert tick_label(1, text) == f"1. {want}"  # Logits and Sampling bars
    assert shown(text) == want  # the layer stack's lens cells


def test_the_table_is_complete_and_there_is_no_other():
    assert set(WHITESPACE) == {" ", "\n", "\t", "\r"}
    assert len(set(WHITESPACE.values())) == 4  # four different marks
    tables = [
        p.relative_to(DESKTOP).as_posix()
        for p in DESKTOP.rglob("*.py")
        if re.search(r"maketrans\(|_WHITESPACE\s*=", p.read_text(encoding="utf-8"))
    ]
    assert tables == ["widgets/token_text.py"]


def test_empty_and_long_pieces():
    assert visible("") == visible_text("") == piece_label("", b"") == "∅"
    assert visible_text("abcdefghijkl", 5) == "abcd…"
    assert piece_label("", b"\xe4\xbd") == "‹e4 bd›"  # bytes that form no character
