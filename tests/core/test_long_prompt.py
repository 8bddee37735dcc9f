"""Long prompts: nothing of size T² is kept; attention map windows come on demand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_lens.core import attention, kvcache
from llm_lens.core.attention import prompt_maps
from llm_lens.core.loop.engine import EAGER_PREFILL_LIMIT, Engine, RunConfig
from llm_lens.core.records import PromptTokens
from llm_lens.core.sampling import GREEDY
from tests.conftest import make_tiny

T = 3000


@pytest.fixture(scope="module")
def long_run(loaded):
    engine = Engine(make_tiny(loaded.tokenizer, max_position_embeddings=4096))
    ids = torch.randint(3, 1000, (T,), generator=torch.Generator().manual_seed(0)).tolist()
    prompt = PromptTokens("x", "x", False, tuple(engine.texts.info(i) for i in ids))
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=3))
    run.run_all()
    return engine, run


def _retained_arrays(run):
    for step in run.steps:
        yield from (step.logits, step.attention, step.hidden, step.attn_update, step.context_ids)
    yield run.prefill.hidden


def test_a_long_run_keeps_no_quadratic_array(long_run):
    engine, run = long_run
    assert T > EAGER_PREFILL_LIMIT  # this prefill took the SDPA path
    biggest = max(a.size for a in _retained_arrays(run))
    assert biggest < T * T // 10
    kept = sum(a.nbytes for a in _retained_arrays(run))
    cache = sum(k.nbytes + v.nbytes for k, v in kvcache.cache_tensors(run.cache))
    info = engine.info
    # what a linear-memory design holds: hidden states per position and layer, the KV cache,
    # one attention row per step; a full set of maps would be layers × heads × T² floats
    linear = 4 * T * (info.num_layers + 1) * info.hidden_size + cache + 4 * 3 * info.vocab_size
    full_maps = 4 * info.num_layers * info.num_heads * T * T
    assert kept < 2 * linear < full_maps / 20
    assert run.steps[0].attention.shape == (info.num_layers, info.num_heads, T)


def test_on_demand_window_is_bounded_and_equals_the_full_map(long_run):
    engine, run = long_run
    hidden = run.prefill.hidden
    m = attention.attention_map(engine, run.cache, hidden, 1, 3, max_size=256)
    assert m.pooled and m.weights.shape[0] <= 256 and m.weights.shape[1] <= 256
    # reference: the eager map of that layer, max-pooled the same way
    with torch.inference_mode():
        layer = engine.anatomy.layers[1]
        attn = engine.anatomy.attn[1]
        h = torch.from_numpy(np.array(hidden[1]))[None]
        pos = torch.arange(T)[None]
        cos, sin = engine.anatomy.rotary(h, pos)
        out = attn(layer.input_layernorm(h), position_embeddings=(cos, sin),
                   attention_mask=_causal(T))[1]  # fmt: skip
    full = out[0, 3].float().numpy()
    block = -(-T // 256)
    assert np.allclose(m.weights, attention.pool_rows(full, block), atol=1e-5)


def _causal(t):
    mask = torch.full((t, t), float("-inf")).triu(1)
    return mask[None, None]


def test_a_halted_window_keeps_its_queries_and_keys_and_no_half_map(long_run, monkeypatch):
    """A map computed ahead of a request stops between row blocks once something else is
    wanted: no map of it is kept, the layer's queries and keys are, and asking for the map
    afterwards runs no attention module again and gives the same map as computing it fresh."""
    engine, run = long_run
    hidden = run.prefill.hidden
    engine.map_memo.clear()
    fresh = attention.attention_map(engine, run.cache, hidden, 1, 2, max_size=256)
    engine.map_memo.clear()
    calls: list[int] = []
    hooks = [a.register_forward_pre_hook(lambda *_a, n=n: calls.append(n))
             for n, a in enumerate(engine.anatomy.attn)]  # fmt: skip
    checks = iter([False, True])  # wanted elsewhere at the second row block
    monkeypatch.setattr(prompt_maps, "_check_halt", lambda *_a: None)  # row blocks' checks only
    try:
        with attention.halting(lambda: next(checks)), pytest.raises(attention.Halted):
            attention.attention_map(engine, run.cache, hidden, 1, 2, max_size=256)
        assert calls == [1]
        assert not engine.map_memo["maps"] and list(engine.map_memo["inputs"]) == [1]
        again = attention.attention_map(engine, run.cache, hidden, 1, 2, max_size=256)
        assert calls == [1]  # the kept queries and keys, not the layer again
        np.testing.assert_array_equal(again.weights, fresh.weights)
        np.testing.assert_array_equal(again.q_positions, fresh.q_positions)
    finally:
        for hook in hooks:
            hook.remove()


def test_work_ahead_gives_way_inside_the_attention_module_and_projects_every_head(long_run):
    """Work ahead of a request stops before the next part of the attention module runs once
    something else is wanted (no map, nothing kept); when it completes it kept every head's
    queries and keys, so any head of that layer then runs no attention module."""
    engine, run = long_run
    hidden = run.prefill.hidden
    engine.map_memo.clear()
    ran: list[str] = []
    attn = engine.anatomy.attn[1]
    parts = attn.named_children()  # each recorded once it ran to its end
    hooks = [m.register_forward_hook(lambda *_a, n=n: ran.append(n)) for n, m in parts]
    checks = iter([False, False, True])  # wanted elsewhere before the module's second part
    try:
        with attention.halting(lambda: next(checks)), pytest.raises(attention.Halted):
            attention.attention_map(engine, run.cache, hidden, 1, 2, max_size=256)
        assert ran == ["q_proj"] and not engine.map_memo["maps"]
        assert not engine.map_memo["inputs"]
        with attention.halting(lambda: False):
            ahead = attention.attention_map(engine, run.cache, hidden, 1, 2, max_size=256)
        assert engine.map_memo["inputs"][1].head is None  # every head's
        ran.clear()
        other = attention.attention_map(engine, run.cache, hidden, 1, 0, max_size=256)
        assert ran == []
    finally:
        for hook in hooks:
            hook.remove()
    engine.map_memo.clear()
    np.testing.assert_allclose(
        attention.attention_map(engine, run.cache, hidden, 1, 2, max_size=256).weights,
        ahead.weights, atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(
        attention.attention_map(engine, run.cache, hidden, 1, 0, max_size=256).weights,
        other.weights, atol=1e-6)  # fmt: skip


def test_the_last_layers_asked_keep_their_queries_and_keys(long_run, monkeypatch):
    """At most KEPT_LAYERS layers' queries and keys are kept, the least recently asked dropped
    first; where every head was projected a kept layer's other head runs no attention module."""
    engine, run = long_run
    hidden = run.prefill.hidden
    monkeypatch.setattr(prompt_maps, "KEPT_LAYERS", 1)
    monkeypatch.setattr(prompt_maps, "_projects_one_head", lambda *_a: False)
    engine.map_memo.clear()
    calls: list[int] = []
    hooks = [a.register_forward_pre_hook(lambda *_a, n=n: calls.append(n))
             for n, a in enumerate(engine.anatomy.attn)]  # fmt: skip
    try:
        for layer, head in ((0, 0), (0, 1), (1, 0), (1, 3), (0, 2)):
            attention.attention_map(engine, run.cache, hidden, layer, head, max_size=256)
        assert calls == [0, 1, 0] and list(engine.map_memo["inputs"]) == [0]
        monkeypatch.setattr(prompt_maps, "KEPT_LAYERS", 2)
        for layer, head in ((1, 1), (0, 3), (1, 2)):
            attention.attention_map(engine, run.cache, hidden, layer, head, max_size=256)
        assert calls == [0, 1, 0, 1] and list(engine.map_memo["inputs"]) == [0, 1]
    finally:
        for hook in hooks:
            hook.remove()


def test_a_layer_projected_for_one_head_keeps_that_heads_queries_alone(long_run, monkeypatch):
    """The bundled model's layout (Llama): one head's map projects that head alone; the kept
    queries serve that head again (its map dropped), another head runs the layer again."""
    engine, run = long_run
    hidden = run.prefill.hidden
    monkeypatch.setattr(prompt_maps, "MAP_MEMO_BYTES", 0)  # the memo holds the last map only
    engine.map_memo.clear()
    assert prompt_maps._projects_one_head(engine, hidden, 1, 0)
    calls: list[int] = []
    hooks = [a.register_forward_pre_hook(lambda *_a, n=n: calls.append(n))
             for n, a in enumerate(engine.anatomy.attn)]  # fmt: skip
    try:
        maps = [attention.attention_map(engine, run.cache, hidden, 1, head, max_size=256).weights
                for head in (0, 1, 0)]  # fmt: skip
        assert calls == [1, 1, 1]  # the kept queries of head 1 cannot serve head 0
        engine.map_memo["maps"].clear()
        again = attention.attention_map(engine, run.cache, hidden, 1, 0, max_size=256).weights
        assert calls == [1, 1, 1]  # those of head 0 serve it
    finally:
        for hook in hooks:
            hook.remove()
    np.testing.assert_array_equal(maps[0], maps[2])
    np.testing.assert_array_equal(maps[0], again)
    monkeypatch.setattr(prompt_maps, "_projects_one_head", lambda *_a: False)
    engine.map_memo.clear()
    every = attention.attention_map(engine, run.cache, hidden, 1, 1, max_size=256).weights
    np.testing.assert_allclose(maps[1], every, atol=1e-6)
