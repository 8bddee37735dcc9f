"""The layer stack (``core/layers.py``, the residual the loop captures): the logit lens and
the residual stream against transformers' own hidden states and head (bundled model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_lens.core import layers
from tests.core.reference import eager_forward

pytestmark = pytest.mark.slow


def test_recorded_residual_stream_equals_output_hidden_states(loaded, greedy20):
    out = eager_forward(loaded.model, greedy20.prompt.ids, output_hidden_states=True)
    ref = torch.stack([h[0] for h in out.hidden_states]).float()  # (layers + 1, T, hidden)
    hidden = torch.from_numpy(np.array(greedy20.prefill.hidden))
    # transformers' last entry already has the final norm applied; the capture's does not
    torch.testing.assert_close(hidden[:-1], ref[:-1], atol=1e-5, rtol=0)
    with torch.inference_mode():
        normed = loaded.model.model.norm(hidden[-1])
    torch.testing.assert_close(normed, ref[-1], atol=1e-4, rtol=1e-5)
    step = greedy20.steps[3]
    out = eager_forward(loaded.model, step.context_ids, output_hidden_states=True)
    last = torch.stack([h[0, -1] for h in out.hidden_states[:-1]]).float().numpy()
    np.testing.assert_allclose(step.hidden[:-1], last, atol=1e-3, rtol=1e-4)


def test_logit_lens_last_layer_equals_the_real_top_tokens(engine, greedy20):
    for step in (greedy20.steps[0], greedy20.steps[5]):
        lens = layers.logit_lens(engine, step, k=5)
        assert lens.top_ids.shape == (engine.info.num_layers + 1, 5)
        np.testing.assert_array_equal(lens.top_ids[-1], step.top_ids[:5])
        np.testing.assert_allclose(lens.top_probs[-1], step.top_probs[:5], rtol=1e-4, atol=1e-6)
        assert lens.final_id == step.token.id


def test_logit_lens_equals_per_layer_unbatched_computation(loaded, engine, greedy20):
    model = loaded.model
    step = greedy20.steps[2]
    lens = layers.logit_lens(engine, step, k=5)
    with torch.inference_mode():
        for layer in range(engine.info.num_layers + 1):
            h = torch.from_numpy(np.array(step.hidden[layer]))[None]  # (1, hidden)
            probs = torch.softmax(model.lm_head(model.model.norm(h))[0].float(), -1)  # (vocab,)
            top_p, top_i = torch.topk(probs, 5)
            np.testing.assert_array_equal(lens.top_ids[layer], top_i.numpy(), err_msg=str(layer))
            np.testing.assert_allclose(lens.top_probs[layer], top_p.numpy(), rtol=1e-4, atol=1e-7)
            assert lens.top_texts[layer][0] == engine.texts.text(int(top_i[0]))


def test_prompt_lens_agrees_with_step_lens_and_real_predictions(loaded, engine, greedy20):
    hidden = greedy20.prefill.hidden
    plens = layers.prompt_lens(engine, hidden, chunk=16)  # several chunks over 38 tokens
    lens0 = layers.logit_lens(engine, greedy20.steps[0], k=1)
    np.testing.assert_array_equal(plens.top1_ids[:, -1], lens0.top_ids[:, 0])
    np.testing.assert_allclose(plens.top1_probs[:, -1], lens0.top_probs[:, 0], rtol=1e-4)
    # the last layer's lens at every prompt position is the model's own next-token prediction
    logits = eager_forward(loaded.model, greedy20.prompt.ids).logits[0]  # (T, vocab)
    np.testing.assert_array_equal(plens.top1_ids[-1], logits.argmax(-1).numpy())
