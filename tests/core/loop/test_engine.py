"""How the loop (``core/loop/engine.py``) stops, is cancelled, and what each step records.

Stop conditions that need odd model settings use the tiny random Llama.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from llm_lens.core.errors import PromptError
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY, SamplingParams
from tests.conftest import make_tiny
from tests.core.reference import N_GREEDY, eager_forward

PROMPT = "Explain transformers like I am 12"


def test_stops_on_max_new_tokens(greedy_run):
    assert greedy_run.finish_reason == "length"
    assert len(greedy_run.steps) == 8
    assert [s.finish_reason for s in greedy_run.steps] == [None] * 7 + ["length"]
    assert [s.index for s in greedy_run.steps] == list(range(8))


def test_stops_on_eos(engine):
    run = engine.start(engine.tokenize("Say hi"), GREEDY, RunConfig(max_new_tokens=60))
    run.run_all()
    assert run.finish_reason == "eos"
    last = run.steps[-1]
    assert last.finish_reason == "eos" and last.token.id in engine.eos_ids and last.token.special
    assert len(run.steps) < 60
    assert all(s.finish_reason is None for s in run.steps[:-1])
    assert all(s.token.id not in engine.eos_ids for s in run.steps[:-1])
    assert "<|im_end|>" not in run.output_text()


def test_stops_on_a_stop_string_spanning_tokens(engine):
    stop = "are a fund"  # ends in the middle of " fundamental"
    run = engine.start(
        engine.tokenize(PROMPT), GREEDY, RunConfig(max_new_tokens=20, stop_strings=(stop,))
    )
    run.run_all()
    assert run.finish_reason == "stop" == run.steps[-1].finish_reason
    assert stop in run.output_text()
    assert stop not in engine.texts.join(run.generated_ids[:-1])
    assert len(run.steps) < 20


def test_stops_on_context_length(loaded):
    eng = Engine(make_tiny(loaded.tokenizer, max_position_embeddings=40))
    assert eng.info.context_length == 40
    prompt = eng.tokenize("one two three four five six seven eight nine ten", chat=False)
    run = eng.start(prompt, GREEDY, RunConfig(max_new_tokens=100))
    run.run_all()
    assert run.finish_reason == "context" == run.steps[-1].finish_reason
    assert len(prompt) + len(run.steps) == 40
    assert run.steps[-1].position == 38  # the 40th token was chosen by the query at 38
    assert run.steps[-1].kv.tokens == 39


def test_cancellation_from_inside_the_loop(tiny_engine):
    cancel = threading.Event()
    prompt = tiny_engine.tokenize("count to a hundred", chat=False)
    run = tiny_engine.start(prompt, GREEDY, RunConfig(max_new_tokens=50), cancel)
    seen = []
    for step in run:
        seen.append(step)
        if len(seen) == 3:
            cancel.set()
    assert run.finish_reason == "cancelled"
    assert run.summary().finish_reason == "cancelled"
    # the event is read after each step: at most the step in flight completes
    assert 3 <= len(run.steps) <= 4
    assert run.steps == seen
    assert run.steps[-1].finish_reason == "cancelled"
    assert all(s.finish_reason is None for s in run.steps[:-1])


def test_cancellation_from_another_thread(tiny_engine):
    cancel = threading.Event()
    prompt = tiny_engine.tokenize("count to a hundred", chat=False)
    run = tiny_engine.start(prompt, GREEDY, RunConfig(max_new_tokens=200), cancel)
    got_three = threading.Event()
    resume = threading.Event()

    def consume():
        for step in run:
            if step.index == 2:
                got_three.set()
                resume.wait(5)

    worker = threading.Thread(target=consume)
    worker.start()
    assert got_three.wait(30)
    cancel.set()
    resume.set()
    worker.join(30)
    assert not worker.is_alive()
    assert run.finish_reason == "cancelled"
    assert len(run.steps) <= 4


def test_run_config_rejects_zero_tokens():
    with pytest.raises(PromptError, match="max new tokens"):
        RunConfig(max_new_tokens=0)


def test_record_shapes(engine, greedy_run):
    info = engine.info
    prompt_len = len(greedy_run.prompt)
    for step in greedy_run.steps:
        assert step.logits.shape == (info.vocab_size,) and step.logits.dtype == np.float32
        assert step.attention.shape == (30, 9, step.position + 1)
        assert step.hidden.shape == (31, 576) and step.attn_update.shape == (30, 576)
        assert step.position == prompt_len - 1 + step.index
        np.testing.assert_array_equal(
            step.context_ids, list(greedy_run.prompt.ids) + greedy_run.generated_ids[: step.index]
        )
    assert greedy_run.prefill.hidden.shape == (31, prompt_len, 576)


def test_timing_fields_positive(greedy_run):
    for step in greedy_run.steps:
        t = step.timing
        assert t.forward_ms > 0 and t.sample_ms > 0 and t.capture_ms > 0
        assert t.total_ms == pytest.approx(t.forward_ms + t.sample_ms + t.capture_ms)


def test_attention_and_mlp_updates_are_the_blocks_outputs(loaded, greedy_run):
    """attn_update is what self-attention added; mlp_update must be the MLP of the midpoint."""
    layers = loaded.model.model.layers
    for step in (greedy_run.steps[0], greedy_run.steps[4]):
        hidden = torch.from_numpy(np.array(step.hidden))  # (layers + 1, hidden)
        attn = torch.from_numpy(np.array(step.attn_update))  # (layers, hidden)
        mlp = torch.from_numpy(np.array(step.mlp_update))
        torch.testing.assert_close(mlp + attn, hidden[1:] - hidden[:-1], atol=1e-4, rtol=0)
        with torch.inference_mode():
            for i, layer in enumerate(layers):
                mid = hidden[i] + attn[i]  # (hidden,) residual after the attention block
                expected = layer.mlp(layer.post_attention_layernorm(mid[None]))[0]
                scale = float(expected.abs().max()) + 1.0
                diff = float((mlp[i] - expected).abs().max())
                assert diff <= 1e-3 * scale, (step.index, i, diff)


def test_sampled_run_records_stages(engine):
    params = SamplingParams(temperature=0.7, top_k=40, top_p=0.9, seed=1)
    run = engine.start(engine.tokenize(PROMPT), params, RunConfig(max_new_tokens=2, top_n=10))
    run.run_all()
    step = run.steps[0]
    assert [s.name for s in step.stages] == ["raw", "temperature", "top_k", "top_p"]
    assert step.stages[2].kept == 40 and step.stages[3].kept <= 40
    assert len(step.top_ids) == 10 and len(step.top_texts) == 10
    assert step.top_texts[0] == engine.texts.text(int(step.top_ids[0]))


# --- fidelity: the loop's logits and tokens against the model's forward and generate()


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_seeded_sampled_run_reproduces_and_depends_on_the_seed(engine, sampled30):
    assert len(sampled30) == 30
    assert sampled_tokens(engine, SAMPLED) == sampled30
    assert sampled_tokens(engine, SAMPLED.with_(seed=4)) != sampled30
