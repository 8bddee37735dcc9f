"""The What-if pane's line for a forgotten token says what it cannot reach: on a hybrid model
forget:P hides the token from the attention layers only, and the Mamba, DeltaNet or short
convolution layers' state still carries it (a pure Mamba model has no attention to hide it
from); on an attention-only model the line is the plain reading. Tiny random models."""

from __future__ import annotations

from typing import Any

import pytest

from llm_lens.core.interventions import Forget, HeadEdit
from llm_lens.core.loop.engine import Engine
from llm_lens.desktop.state.whatif import forget_note
from tests.families import family_model
from tests.hybrid_families import hybrid_model

CARRY = {
    "jamba": "attention layers only: the state-space layers still carry it",
    "lfm2": "attention layers only: the short convolution layers still carry it",
    "qwen3_next": "attention layers only: the linear attention layers still carry it",
    "falcon_h1": "attention layers only: the state-space layers still carry it",
    "mamba": "no attention layer to hide it from: the state-space layers still carry it",
}


def _pane(qtbot: Any, bare: Any, info: Any) -> Any:
    from llm_lens.desktop.panes.whatif import WhatIfPane

    pane = WhatIfPane(bare)
    qtbot.addWidget(pane)
    bare.use_model(info)
    bare.sig_model_loaded.emit(info)  # as a load announces it: the lines are read again
    bare.whatif.add(Forget(1))
    bare.whatif.add(HeadEdit(1, 0))
    return pane


@pytest.mark.parametrize("name", list(CARRY))
def test_forget_on_a_hybrid_says_the_state_still_carries_it(name, qtbot, bare, tokenizer):
    info = Engine(hybrid_model(name, tokenizer)).info
    pane = _pane(qtbot, bare, info)
    assert pane.rows() == [(f"forget token 1 · {CARRY[name]}", True), ("head 1.0 = 0", True)]
    assert CARRY[name] in pane.table.item(0, 0).toolTip()
    assert forget_note(info) == CARRY[name]


def test_forget_on_an_attention_model_is_the_plain_reading(qtbot, bare, tokenizer):
    info = Engine(family_model("gpt2", tokenizer)).info
    pane = _pane(qtbot, bare, info)
    assert pane.rows() == [("forget token 1", True), ("head 1.0 = 0", True)]
    assert forget_note(info) == "" and forget_note(None) == ""
