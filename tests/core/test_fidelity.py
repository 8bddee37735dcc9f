"""The engine's numbers against the real model's own: logits, tokens, attention, residual, lens.

Every reference here is computed by calling the transformers model directly (no cache, eager
attention, ``generate()``, ``apply_chat_template``), never through ``core``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_lens.core import attention, layers
from llm_lens.core.loop.engine import EAGER_PREFILL_LIMIT, RunConfig
from llm_lens.core.sampling import GREEDY, SamplingParams

pytestmark = pytest.mark.slow

PROMPT = "Explain transformers like I am 12"
N_GREEDY = 20
LENS_LAYERS = (0, 7, 15, 29)
HEADS = (0, 4, 8)


@pytest.fixture(scope="module")
def greedy20(engine):
    run = engine.start(engine.tokenize(PROMPT), GREEDY, RunConfig(max_new_tokens=N_GREEDY))
    run.run_all()
    assert len(run.steps) == N_GREEDY and run.finish_reason == "length"
    return run


def eager_forward(model, ids, **kw):
    """A fresh full forward without a cache, eager attention (the reference path)."""
    model.set_attn_implementation("eager")
    with torch.inference_mode():
        return model(torch.tensor([list(ids)]), use_cache=False, **kw)


def test_cached_decode_logits_equal_a_fresh_full_forward(loaded, greedy20):
    assert len(greedy20.steps) >= 12
    for step in greedy20.steps:
        ctx = step.context_ids
        assert len(ctx) == step.position + 1
        ref = eager_forward(loaded.model, ctx).logits[0, -1].float().numpy()  # (vocab,)
        tol = 1e-4 * np.abs(ref).max()
        assert np.abs(step.logits - ref).max() <= tol, step.index
        # the record's derived numbers are those of the reference distribution
        assert step.token.id == int(ref.argmax())
        logp = torch.log_softmax(torch.from_numpy(ref), -1)
        assert step.logprob == pytest.approx(float(logp[step.token.id]), abs=1e-4)
        assert step.rank == 0
        np.testing.assert_array_equal(step.top_ids[:5], np.argsort(-ref)[:5])


def test_greedy_tokens_equal_generate(loaded, engine, greedy20):
    ids = torch.tensor([greedy20.prompt.ids])
    loaded.model.set_attn_implementation("eager")
    with torch.inference_mode():
        out = loaded.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=N_GREEDY,
            repetition_penalty=1.0,
            temperature=None,
            top_k=None,
            top_p=None,
            min_p=None,
            no_repeat_ngram_size=0,
        )
    expected = out[0, ids.shape[1] :].tolist()
    assert len(expected) == N_GREEDY
    assert greedy20.generated_ids == expected
    assert greedy20.output_text() == loaded.tokenizer.decode(expected, skip_special_tokens=True)


SAMPLED = SamplingParams(temperature=0.8, top_p=0.9, seed=3)


def sampled_tokens(engine, params: SamplingParams) -> list[int]:
    run = engine.start(engine.tokenize(PROMPT), params, RunConfig(max_new_tokens=30))
    run.run_all()
    return run.generated_ids


@pytest.fixture(scope="module")
def sampled30(engine):
    return sampled_tokens(engine, SAMPLED)


def test_seeded_sampled_run_equals_generate_with_the_same_seed(loaded, engine, sampled30):
    """generate() draws from torch's default generator; the engine from its own, same seed."""
    ids = torch.tensor([engine.tokenize(PROMPT).ids])
    torch.manual_seed(SAMPLED.seed)
    with torch.inference_mode():
        out = loaded.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=SAMPLED.temperature,
            top_p=SAMPLED.top_p,
            top_k=0,
            min_p=None,
            repetition_penalty=1.0,
            max_new_tokens=30,
        )
    assert sampled30 == out[0, ids.shape[1] :].tolist()


def test_seeded_sampled_run_reproduces_and_depends_on_the_seed(engine, sampled30):
    assert len(sampled30) == 30
    assert sampled_tokens(engine, SAMPLED) == sampled30
    assert sampled_tokens(engine, SAMPLED.with_(seed=4)) != sampled30


@pytest.mark.parametrize(
    ("text", "system"),
    [
        (PROMPT, None),
        ("Bonjour, ça va ? 🙂", None),
        ("line one\nline two\n\n  indented", "You answer in one word."),
        ("", None),
    ],
)
def test_chat_template_ids_equal_apply_chat_template(loaded, engine, text, system):
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": text})
    enc = loaded.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = list(enc["input_ids"] if hasattr(enc, "keys") else enc)
    assert engine.tokenize(text, chat=True, system=system).ids == expected


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
