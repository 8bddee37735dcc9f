"""The analysis dispatch (``core/loop/analyses.py``): each kind answered by its stage's own
function, None where the run lacks what the kind needs, and the requests likely next."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from llm_lens.core import layers
from llm_lens.core.embeddings import hidden_paths
from llm_lens.core.loop.analyses import compute
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.conftest import make_tiny


@pytest.fixture(scope="module")
def tiny_run(tokenizer):
    engine = Engine(make_tiny(tokenizer))
    run = engine.start(engine.tokenize("One two three", chat=False), GREEDY, RunConfig(3))
    run.run_all()
    return engine, run


def test_each_kind_is_its_stages_answer_and_none_without_what_it_needs(tiny_run):
    engine, run = tiny_run
    got = compute("lens", engine, run, {"step": 2, "k": 3})
    want = layers.logit_lens(engine, run.steps[2], 3)
    assert np.array_equal(got.top_ids, want.top_ids) and got.top_texts == want.top_texts
    assert got.top_ids.shape == (engine.info.num_layers + 1, 3)
    paths = compute("hidden_paths", engine, run, {})
    assert np.array_equal(paths.coords, hidden_paths(run.prefill.hidden).coords)
    full = compute("attention_map", engine, run, {"layer": 1, "head": 0})
    t = len(run.prompt)
    assert full.weights.shape[-2:] == (t, t)
    np.testing.assert_allclose(full.weights.sum(axis=-1), 1.0, atol=1e-5)  # softmax rows
    not_started = engine.start(engine.tokenize("Hi", chat=False), GREEDY, RunConfig(1))
    assert compute("lens", engine, not_started, {"step": 0}) is None  # no prefill yet
    recorded = SimpleNamespace(steps=run.steps, prefill=run.prefill, cache=None)
    assert compute("attention_map", engine, recorded, {"layer": 0, "head": 0}) is None
    assert compute("prompt_lens", engine, recorded, {}) is not None  # needs no cache
    with pytest.raises(ValueError, match="unknown analysis 'nope'"):
        compute("nope", engine, run, {})


def test_the_likely_next_maps_are_a_spin_box_step_away_inside_the_model():
    from types import SimpleNamespace

    from llm_lens.core.loop.analyses import likely_next

    info = SimpleNamespace(num_layers=30, num_heads=9, heads_in=lambda n: 4 if n == 7 else 9)
    args = {"layer": 5, "head": 2, "max_size": 512}
    assert [(a["layer"], a["head"], a["max_size"]) for a in likely_next("attention_map", args, info)
            ] == [(6, 2, 512), (5, 3, 512), (4, 2, 512), (5, 1, 512)]  # fmt: skip
    corner = {"layer": 29, "head": 0, "max_size": 256}
    assert [(a["layer"], a["head"]) for a in likely_next("attention_map", corner, info)] == [
        (29, 1), (28, 0)]  # fmt: skip
    narrow = {"layer": 6, "head": 5, "max_size": 256}  # layer 7 has 4 heads (Inkling's differ)
    assert [(a["layer"], a["head"]) for a in likely_next("attention_map", narrow, info)] == [
        (6, 6), (5, 5), (6, 4)]  # fmt: skip
    assert likely_next("lens", {"step": 3}, info) == []
