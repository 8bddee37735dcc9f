"""The capture hooks (``core/loop/capture.py``) against transformers' own forward: the residual
stream it records is the model's ``output_hidden_states``, its attention rows the model's
``output_attentions``, and its attention updates what the block adds (checked by hand)."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.attention import use_lens_attention
from llm_lens.core.loop.capture import Capture

LAYERS = 3
IDS = [3, 9, 27, 5, 11, 2]
CACHE_KW = (
    "cache"
    if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters
    else ("past_key_values")
)


@pytest.fixture(scope="module")
def model() -> Any:
    """A tiny random Llama routed through the lens attention (the engine's set-up)."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64)  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    assert use_lens_attention(model)
    return model


def reference(model: Any, ids: list[int]) -> Any:
    """transformers' own eager forward with no cache: hidden states and attention weights."""
    model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            return model(torch.tensor([ids]), use_cache=False, output_hidden_states=True,
                         output_attentions=True)  # fmt: skip
    finally:
        use_lens_attention(model)


def test_a_prompts_residual_stream_and_attention_rows_are_the_models_own(model):
    ref = reference(model, IDS)
    anatomy = Anatomy.of(model)
    with torch.inference_mode(), Capture(anatomy) as cap:
        out = model(torch.tensor([IDS]), use_cache=False)
    assert torch.equal(out.logits, ref.logits)  # the hooks change nothing
    positions = cap.all_positions()  # (layers + 1, seq, hidden)
    assert positions.shape == (LAYERS + 1, len(IDS), 32)
    for i in range(LAYERS):  # the first layer's input, then each layer's output
        torch.testing.assert_close(positions[i], ref.hidden_states[i][0], rtol=0, atol=0)
    # transformers' last hidden state has the final norm applied; the capture's is the raw stream
    final = anatomy.final_norm(positions[LAYERS])
    torch.testing.assert_close(final, ref.hidden_states[LAYERS][0], rtol=0, atol=1e-6)
    for layer, row in enumerate(cap.attn_rows):  # (heads, kv): the last query's probabilities
        torch.testing.assert_close(row, ref.attentions[layer][0, :, -1], rtol=0, atol=1e-7)
    taken = cap.take_positions()
    assert not taken.flags.writeable and np.array_equal(taken, positions.numpy())


def test_attention_updates_are_what_each_block_adds_before_its_mlp(model):
    anatomy = Anatomy.of(model)
    before = [len(layer._forward_hooks) for layer in anatomy.layers]
    with torch.inference_mode(), Capture(anatomy) as cap:
        assert [len(layer._forward_hooks) for layer in anatomy.layers] > before
        model(torch.tensor([IDS]), use_cache=False)
        hidden, updates = cap.last_position()  # (layers + 1, hidden), (layers, hidden)
        assert hidden.shape == (LAYERS + 1, 32) and updates.shape == (LAYERS, 32)
        for i, layer in enumerate(anatomy.layers):  # Llama: h + attn, then + mlp(norm(.))
            mid = hidden[i] + updates[i]
            want = mid + layer.mlp(layer.post_attention_layernorm(mid))
            torch.testing.assert_close(want, hidden[i + 1], rtol=0, atol=1e-5)
    assert [len(layer._forward_hooks) for layer in anatomy.layers] == before  # removed on exit


def test_a_cached_decode_step_records_the_last_position_like_a_full_forward(model):
    cache = {CACHE_KW: DynamicCache()}  # the engine's keyword: ``cache`` in transformers 5
    with torch.inference_mode():
        model(torch.tensor([IDS]), use_cache=True, **cache)
        with Capture(Anatomy.of(model)) as cap:
            model(torch.tensor([[7]]), use_cache=True, **cache)
    ref = reference(model, [*IDS, 7])
    assert [h.shape for h in cap.hidden] == [(1, 1, 32)] * (LAYERS + 1)  # one row each
    hidden, _ = cap.last_position()
    for i in range(LAYERS):
        torch.testing.assert_close(hidden[i], ref.hidden_states[i][0, -1], rtol=1e-5, atol=1e-5)
    for layer, row in enumerate(cap.attn_rows):  # the new query against all seven keys
        assert row.shape == (4, len(IDS) + 1)
        torch.testing.assert_close(row, ref.attentions[layer][0, :, -1], rtol=1e-5, atol=1e-6)
