"""Attention (``core/attention.py``) against the model's own eager ``output_attentions``: the
recorded rows, the on-demand maps, pooled maps of long prompts (bundled model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_lens.core import attention
from llm_lens.core.loop.engine import EAGER_PREFILL_LIMIT, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.core.reference import N_GREEDY, eager_forward

pytestmark = pytest.mark.slow

LENS_LAYERS = (0, 7, 15, 29)
HEADS = (0, 4, 8)


def test_prefill_attention_row_and_maps_equal_eager_output_attentions(loaded, engine, greedy20):
    prompt_ids = greedy20.prompt.ids
    att = eager_forward(loaded.model, prompt_ids, output_attentions=True).attentions
    ref = torch.stack([a[0] for a in att]).float().numpy()  # (layers, heads, T, T)
    info = engine.info
    assert ref.shape == (info.num_layers, info.num_heads, len(prompt_ids), len(prompt_ids))
    row = greedy20.steps[0].attention  # (layers, heads, T)
    assert row.shape == ref[:, :, -1, :].shape
    np.testing.assert_allclose(row, ref[:, :, -1, :], atol=1e-5)
    hidden = greedy20.prefill.hidden
    for layer in LENS_LAYERS:
        for head in HEADS:
            amap = attention.attention_map(engine, greedy20.cache, hidden, layer, head)
            assert not amap.pooled
            np.testing.assert_allclose(amap.weights, ref[layer, head], atol=1e-5)
    # every thumbnail of every head, unpooled when the size covers the prompt
    overview = attention.attention_overview(engine, greedy20.cache, hidden, size=len(prompt_ids))
    np.testing.assert_allclose(overview, ref, atol=1e-5)


@pytest.mark.parametrize("index", [1, 6, N_GREEDY - 1])
def test_decode_attention_row_equals_last_row_of_full_eager_forward(loaded, greedy20, index):
    step = greedy20.steps[index]
    att = eager_forward(loaded.model, step.context_ids, output_attentions=True).attentions
    ref = torch.stack([a[0, :, -1, :] for a in att]).float().numpy()  # (layers, heads, kv)
    assert step.attention.shape == ref.shape == (30, 9, step.position + 1)
    np.testing.assert_allclose(step.attention, ref, atol=1e-5)
    np.testing.assert_allclose(step.attention.sum(-1), 1.0, atol=1e-5)


@pytest.fixture(scope="module")
def long_run(engine):
    text = "The quick brown fox jumps over the lazy dog while the cat sleeps. " * 24
    prompt = engine.tokenize(text, chat=False)
    assert EAGER_PREFILL_LIMIT < len(prompt) < 400
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=2))
    calls = []
    original = engine.forward

    def spy(ids, cache, eager):
        calls.append((ids.shape[1], eager))
        return original(ids, cache, eager)

    engine.forward = spy
    try:
        run.run_all()
    finally:
        del engine.forward  # back to the class's method
    assert calls == [(len(prompt), False), (1, True)]  # SDPA prefill, eager decode
    return run


LONG_HEADS = ((3, 2), (17, 7))  # (layer, head)


def test_long_prompt_maps_equal_the_eager_maps(loaded, engine, long_run):
    """The on-demand maps and the recorded row of an SDPA prefill, against eager weights.

    Only the hooked layers' weights are kept, so the 30 × 9 × T² maps never exist at once.
    """
    model = loaded.model
    tokens = len(long_run.prompt)
    kept: dict[int, torch.Tensor] = {}
    last_rows: list[torch.Tensor] = [None] * engine.info.num_layers

    def hook(layer):
        def on_attn(_m, _i, output):
            weights = output[1][0]  # (heads, T, T)
            last_rows[layer] = weights[:, -1].clone()
            if layer in dict(LONG_HEADS):
                kept[layer] = weights[dict(LONG_HEADS)[layer]].clone()  # (T, T)

        return on_attn

    handles = [a.self_attn.register_forward_hook(hook(i)) for i, a in enumerate(model.model.layers)]
    try:
        out = eager_forward(model, long_run.prompt.ids, logits_to_keep=1)
    finally:
        for h in handles:
            h.remove()
    ref_logits = out.logits[0, -1].float().numpy()
    step0 = long_run.steps[0]
    assert np.abs(step0.logits - ref_logits).max() <= 1e-4 * np.abs(ref_logits).max()
    np.testing.assert_allclose(step0.attention, torch.stack(last_rows).numpy(), atol=1e-5)
    hidden = long_run.prefill.hidden
    for layer, head in LONG_HEADS:
        ref = kept[layer].numpy()  # (T, T)
        full = attention.attention_map(engine, long_run.cache, hidden, layer, head, max_size=2048)
        assert not full.pooled and full.weights.shape == (tokens, tokens)
        np.testing.assert_allclose(full.weights, ref, atol=1e-5)
        np.testing.assert_allclose(full.weights[-80:, 300:], ref[-80:, 300:], atol=1e-5)
        pooled = attention.attention_map(engine, long_run.cache, hidden, layer, head, max_size=128)
        block = -(-tokens // 128)
        assert pooled.pooled and pooled.weights.shape == (-(-tokens // block),) * 2
        np.testing.assert_array_equal(pooled.q_positions, np.arange(0, tokens, block))
        np.testing.assert_allclose(pooled.weights, max_pool(ref, block), atol=1e-5)


def max_pool(w: np.ndarray, block: int) -> np.ndarray:
    """Independent block max-pool: every output cell is the max of its (block, block) window."""
    starts = np.arange(0, w.shape[0], block)
    return np.maximum.reduceat(np.maximum.reduceat(w, starts, axis=0), starts, axis=1)


@pytest.mark.parametrize("rows, offset, queries", [(4, 0, 10), (4, 3, 12), (5, 0, 5), (1, 2, 3)])
def test_the_row_blocks_causal_masks_are_the_eager_masks(rows, offset, queries):
    """A prompt map's row blocks read their causal masks as views of one buffer; each is the
    mask :func:`_block_mask` builds as transformers' eager mask has it, partial last block too."""
    from llm_lens.core.attention import _block_mask, _CausalMasks

    total = offset + queries
    masks = _CausalMasks(rows, total, torch.float32, None)
    for start in range(0, queries, rows):
        stop = min(queries, start + rows)
        keys = offset + stop
        made = masks.rows(offset + start, stop - start)
        expected = _block_mask(None, start, stop, offset, keys, torch.float32)
        if expected is None:  # one query reading every key: nothing masked
            expected = torch.zeros((1, 1, 1, keys))
        assert torch.equal(made, expected), (start, stop)
