"""The Attention pane's note under the map says which attention the map is: on a model whose
blocks hold several attention sublayers (LongCat-Flash), that it is the block's first."""

from __future__ import annotations

from typing import Any

import numpy as np

from llm_lens.core.loop.engine import Engine
from llm_lens.desktop.panes.attention.header import map_note
from tests.families import family_model
from tests.newer_families import newer_model


def test_a_block_of_two_attention_sublayers_says_its_map_is_the_first(tokenizer: Any) -> None:
    info = Engine(newer_model("longcat_flash", tokenizer)).info
    assert info.sublayers == 2
    amap = np.zeros((1, 1), np.float32)
    note = map_note(info, 0, amap, 1, "computing…")
    assert "the first of this block's 2 attention sublayers" in note
    assert "max-pooled in blocks of 4" in map_note(info, 0, amap, 4, "computing…")
    assert map_note(info, 0, None, 1, "computing…") == "computing…"  # no map yet: waiting


def test_one_attention_a_layer_adds_no_note(tokenizer: Any) -> None:
    info = Engine(family_model("llama3", tokenizer)).info
    assert map_note(info, 0, np.zeros((1, 1), np.float32), 1, "computing…") == ""
