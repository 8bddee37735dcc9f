"""Several parallel residual streams (Gemma 3n's AltUp, DeepSeek-V4's and HY-v4's
hyper-connections): the layout found from the model's own first layer, the recorded residual
= what the model's own final norm reads, the lens's last row = the output, the trace = the
model's own ``generate()``, "Why this token?" a one-line reason, and residual interventions
equal to a hand-written hook on the model's own stream stack.

The models are tiny seeded ones from ``tests/stream_families.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core import layers
from llm_lens.core.interventions.hooks import Patcher
from llm_lens.core.interventions.spec import InterventionError, ResidualAdd
from llm_lens.core.interventions.steer import patch_from
from llm_lens.core.interventions.sweep import Sweep
from llm_lens.core.loop.analyses import compute
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from llm_lens.core.streams import SINGLE, Streams, streams_of
from tests.families import assert_greedy_equals_generate
from tests.stream_families import STREAMS, stream_model

PROMPT = "The quick brown fox jumps over the lazy dog"
OTHER = "A slow green cat walks under the busy cat"
NEW = 3
ALL = list(STREAMS)
_runs: dict[str, Any] = {}


def _run(name: str, tokenizer: Any) -> Any:
    """(engine, run) of a finished greedy run of the family, built once."""
    if name not in _runs:
        engine = Engine(stream_model(name, tokenizer))
        run = engine.start(engine.tokenize(PROMPT, chat=False), GREEDY, RunConfig(NEW))
        run.run_all()
        _runs[name] = engine, run
    return _runs[name]


def _ids(engine: Any, text: str) -> torch.Tensor:
    return torch.tensor([list(engine.tokenize(text, chat=False).ids)])  # (1, T)


def _logits(engine: Any, ids: torch.Tensor) -> np.ndarray:
    with torch.inference_mode():
        return engine.model(input_ids=ids, use_cache=False).logits[0].float().numpy()


@pytest.mark.parametrize("name", ALL)
def test_the_layout_is_read_from_the_first_layers_input(tokenizer: Any, name: str) -> None:
    engine, _ = _run(name, tokenizer)
    assert streams_of(engine.anatomy) == Streams(*STREAMS[name][2])
    assert "4 parallel streams" in engine.info.residual_note
    assert engine.info.residual_streams == 4
    assert "collapses them into before its final norm" in engine.info.residual_note


def test_one_stream_has_no_note(engine: Any) -> None:
    assert streams_of(engine.anatomy) == SINGLE
    assert engine.info.residual_note == "" and engine.info.residual_streams == 1


@pytest.mark.parametrize("name", ALL)
def test_greedy_tokens_and_logits_equal_generate(tokenizer: Any, name: str) -> None:
    engine, run = _run(name, tokenizer)
    assert_greedy_equals_generate(engine, run)


@pytest.mark.parametrize("name", ALL)
def test_the_last_residual_is_what_the_final_norm_reads(tokenizer: Any, name: str) -> None:
    """The model's own forward, hooked by hand at its final norm: its input at every prompt
    position is the prompt's last recorded residual row."""
    engine, run = _run(name, tokenizer)
    read: list[Any] = []
    hook = engine.anatomy.final_norm.register_forward_pre_hook(lambda _m, a: read.append(a[0]))
    try:
        _logits(engine, torch.tensor([run.prompt.ids]))
    finally:
        hook.remove()
    want = read[0][0].float().numpy()  # (T, hidden)
    np.testing.assert_allclose(run.prefill.hidden[-1], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run.steps[0].hidden[-1], want[-1], rtol=1e-5, atol=1e-5)
    norms = run.steps[0].residual_norms
    assert norms.shape == (engine.info.num_layers + 1,) and np.isfinite(norms).all()


def test_stacks_collapsed_one_a_pass_are_the_same(tokenizer: Any, monkeypatch: Any) -> None:
    """A long prompt's stacks are collapsed one a pass (the budget): the same rows."""
    from llm_lens.core import streams

    engine, run = _run("deepseek_v4", tokenizer)
    monkeypatch.setattr(streams, "COLLAPSE_BUDGET", 1)
    again = engine.start(run.prompt, GREEDY, RunConfig(NEW))
    again.run_all()
    np.testing.assert_allclose(again.prefill.hidden, run.prefill.hidden, rtol=1e-5, atol=1e-6)
    for a, b in zip(again.steps, run.steps, strict=True):  # (batched matmuls round apart)
        np.testing.assert_allclose(a.hidden, b.hidden, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ALL)
def test_the_lens_last_row_is_the_output(tokenizer: Any, name: str) -> None:
    engine, run = _run(name, tokenizer)
    for step in run.steps:
        with torch.inference_mode():
            lens = layers.lens_logits(engine, torch.from_numpy(np.array(step.hidden)))
        assert lens.shape == (engine.info.num_layers + 1, engine.info.vocab_size)
        scale = np.abs(step.logits).max()
        np.testing.assert_allclose(lens[-1].numpy(), step.logits, atol=1e-4 * scale)
        assert not np.allclose(lens[0].numpy(), lens[-1].numpy())  # the rows are each layer's
    prompt = layers.prompt_lens(engine, run.prefill.hidden)
    own = _logits(engine, torch.tensor([run.prompt.ids])).argmax(-1)
    assert prompt.top1_ids[-1].tolist() == own.tolist()


@pytest.mark.parametrize("name", ALL)
def test_why_this_token_says_why_it_does_not_split(tokenizer: Any, name: str) -> None:
    engine, run = _run(name, tokenizer)
    x = compute("explain", engine, run, {"step": len(run.steps) - 1})
    assert x.logits.unsplit.startswith("the residual is 4 parallel streams that the layers mix")
    step = run.steps[-1]
    logp = torch.log_softmax(torch.from_numpy(np.array(step.logits)), -1)[step.token.id]
    assert x.inputs.logprob == pytest.approx(float(logp), abs=1e-4)
    assert np.isfinite(x.inputs.values).all() and np.abs(x.inputs.values).sum() > 0


@pytest.mark.parametrize("name", ALL)
def test_prompt_maps_are_the_models_own_attention(tokenizer: Any, name: str) -> None:
    """The Attention pane's map re-runs the prompt's tokens (a collapsed residual cannot be a
    layer's input): every head's map = the model's own eager attention weights."""
    engine, run = _run(name, tokenizer)
    if not engine.attention_maps:  # DeepSeek-V4 runs its own attention and says so
        assert engine.info.attention_note
        assert compute("attention_map", engine, run, {"layer": 0, "head": 0}) is None
        return
    engine.model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            ids = torch.tensor([run.prompt.ids])
            own = engine.model(input_ids=ids, use_cache=False, output_attentions=True).attentions
    finally:
        engine.model.set_attn_implementation("llm_lens")
    for layer in range(engine.info.num_layers):
        for head in (0, engine.info.num_heads - 1):
            got = compute("attention_map", engine, run, {"layer": layer, "head": head})
            want = own[layer][0, head].float().numpy()
            np.testing.assert_allclose(got.weights, want, atol=1e-5)


def _by_hand(engine: Any, name: str, layer: int, edit: Any, ids: torch.Tensor) -> np.ndarray:
    """The model's logits over ``ids`` with ``edit(stack)`` applied by hand to the stream
    stack entering ``layer``, its streams moved to the front ((streams, batch, seq, hidden))."""
    axis = STREAMS[name][2][1]

    def hook(_m: Any, args: Any, kwargs: Any) -> Any:
        h = (args[0] if args else kwargs["hidden_states"]).clone()
        edit(h.movedim(axis, 0))
        return ((h, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": h})

    handle = engine.anatomy.layers[layer].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        return _logits(engine, ids)
    finally:
        handle.remove()


def _patched(engine: Any, items: list[Any], ids: torch.Tensor) -> np.ndarray:
    patcher = Patcher(engine.model, engine.anatomy, items)
    with patcher.active():
        return _logits(engine, ids)


@pytest.mark.parametrize("name", ALL)
def test_a_patch_from_another_prompt_puts_back_every_stream(tokenizer: Any, name: str) -> None:
    engine, _ = _run(name, tokenizer)
    clean, other = _ids(engine, PROMPT), _ids(engine, OTHER)
    assert clean.shape == other.shape
    patch = patch_from(engine.model, engine.anatomy, 1, other[0].tolist(), [3, 5])
    assert len(patch.values[0]) == 4 * engine.info.hidden_size  # every stream's own numbers
    kept: list[Any] = []
    grab = engine.anatomy.layers[1].register_forward_pre_hook(
        lambda _m, a, k: kept.append((a[0] if a else k["hidden_states"]).clone()),
        with_kwargs=True,
    )
    try:
        _logits(engine, other)
    finally:
        grab.remove()
    theirs = kept[0].movedim(STREAMS[name][2][1], 0)  # (streams, 1, T, hidden)

    def put(stack: Any) -> None:
        stack[:, :, [3, 5]] = theirs[:, :, [3, 5]]

    want = _by_hand(engine, name, 1, put, clean)
    got = _patched(engine, [patch], clean)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(got, _logits(engine, clean), atol=1e-4)  # the patch changed them


@pytest.mark.parametrize("name", ALL)
def test_a_residual_vector_goes_into_every_stream(tokenizer: Any, name: str) -> None:
    engine, _ = _run(name, tokenizer)
    hidden = engine.info.hidden_size
    vector = torch.linspace(-2.0, 2.0, hidden)
    item = ResidualAdd(1, (2, 4), tuple(vector.tolist()))

    def add(stack: Any) -> None:
        stack[:, :, [2, 4]] += vector.to(stack.dtype)

    clean = _ids(engine, PROMPT)
    np.testing.assert_allclose(
        _patched(engine, [item], clean), _by_hand(engine, name, 1, add, clean), rtol=1e-5,
        atol=1e-5,
    )  # fmt: skip
    with pytest.raises(InterventionError, match=f"{hidden} or {4 * hidden}"):
        Patcher(engine.model, engine.anatomy, [ResidualAdd(1, (), (1.0,) * (hidden + 1))])


@pytest.mark.parametrize("name", ALL[:1])
def test_the_patching_sweep_says_why_it_is_not_run(tokenizer: Any, name: str) -> None:
    engine, _ = _run(name, tokenizer)
    ids = list(engine.tokenize(PROMPT, chat=False).ids)
    with pytest.raises(InterventionError, match="4 parallel streams"):
        Sweep(engine.model, engine.anatomy, ids, ids)


@pytest.mark.parametrize("name", ["deepseek_v4", "hy_v4"])
def test_a_nan_is_placed_at_its_position_not_its_stream(tokenizer: Any, name: str) -> None:
    """A NaN in one token's embedding: named at the embeddings, at that token's position alone
    (each of its streams holds it, and a stream is not a position). (Gemma 3n's cache of
    shared layers cannot be cropped for the probed pass: the step's own capture places it.)"""
    from transformers import AutoModelForCausalLM

    from llm_lens.core.errors import NonFiniteError
    from llm_lens.core.loading import LoadedModel, describe
    from tests.stream_families import stream_config

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        stream_config(name, len(tokenizer)), attn_implementation="eager"
    ).eval()
    engine = Engine(LoadedModel(model, tokenizer, describe(model, name, "test", "tiny")))
    prompt = engine.tokenize(PROMPT, chat=False)
    with torch.no_grad():
        engine.anatomy.embed.weight[prompt.ids[3]] = float("nan")
    run = engine.start(prompt, GREEDY, RunConfig(NEW))
    with pytest.raises(NonFiniteError) as caught:
        run.run_all()
    assert (caught.value.value, caught.value.where) == (
        "NaN",
        "the embeddings (the first layer's input)",
    )
    assert caught.value.positions == (3,)
