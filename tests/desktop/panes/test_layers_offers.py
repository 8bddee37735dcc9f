"""The Layer stack's What if? offers follow the layer's own parts (core's Anatomy, through
ModelInfo): a Mamba or convolution layer offers its mixer, not attention; an attention layer
offers attention; a pure Mamba layer has no MLP to offer; Falcon-H1's parallel layers offer all
three. Tiny random hybrid models (tests/hybrid_families.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from llm_lens.core.interventions import BlockEdit
from llm_lens.core.loop.engine import Engine
from llm_lens.desktop.panes.layers.pane import block_parts, layer_block_changes
from llm_lens.desktop.state.whatif import describe
from tests.hybrid_families import hybrid_model

PARTS = {
    "jamba": (["mixer", "mlp"], ["attn", "mlp"]),
    "lfm2": (["mixer", "mlp"], ["attn", "mlp"]),
    "qwen3_next": (["mixer", "mlp"], ["attn", "mlp"]),
    "mamba": (["mixer"], ["mixer"]),
    "falcon_h1": (["attn", "mixer", "mlp"],) * 2,
}


@pytest.mark.parametrize("name", list(PARTS))
def test_each_layer_offers_the_parts_it_has(name: str, tokenizer: Any) -> None:
    info = Engine(hybrid_model(name, tokenizer)).info
    assert [block_parts(info, layer) for layer in (0, 1)] == list(PARTS[name])


def test_an_unknown_model_offers_attention_and_mlp() -> None:
    info = SimpleNamespace(layer_kinds=(), layer_mlps=())
    assert block_parts(info, 3) == ["attn", "mlp"]


def test_the_pane_offers_a_mamba_layer_its_mixer_not_attention(qtbot, bare, tokenizer) -> None:
    from llm_lens.desktop.panes.layers import LayerStackPane

    engine = Engine(hybrid_model("jamba", tokenizer))
    bare.use_model(engine.info)
    pane = LayerStackPane(bare)
    qtbot.addWidget(pane)
    pane._prompt_lens = SimpleNamespace(top1_ids=np.zeros((3, 4), int))  # layers 0-1, 4 tokens
    offers = pane.block_changes(1.5)  # row 1: the stream after layer 0 (Mamba)
    assert offers == [BlockEdit(0, "mixer", 0.0), BlockEdit(0, "mlp", 0.0),
                      BlockEdit(0, "mixer", 0.5), BlockEdit(0, "mlp", 0.5)]  # fmt: skip
    assert describe(offers[0]) == "mixer 0 = 0"
    assert pane.block_changes(2.5)[0] == BlockEdit(1, "attn", 0.0)
    assert pane.block_changes(0.5) == []  # row 0: the embeddings, no block wrote it
    assert layer_block_changes(engine.info, 1)[1] == BlockEdit(1, "mlp", 0.0)
    run = engine.start(
        engine.tokenize("the cat", chat=False), *_greedy(), interventions=[offers[0]]
    )
    run.run_all()  # the offer runs (it named a module the layer has)
    assert len(run.steps) == 2


def _greedy() -> tuple[Any, Any]:
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY

    return GREEDY, RunConfig(max_new_tokens=2)
