"""Hybrid and state-space families: each layer's mixer named, the trace equal to the model's own
``generate()``, no attention rows where a layer has no attention, the cache's growing K/V and
constant conv/recurrent state measured = formula, and the lens's last row the model's output.

The models are tiny seeded ones from ``tests/hybrid_families.py`` (Qwen3-Next, Granite 4, LFM2,
Jamba, Bamba, Nemotron-H, Zamba2, Mamba2, Falcon-H1; DeepSeek-V3 for its latent attention, Cohere
and Cohere 2 for their logit scale).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core import layers
from llm_lens.core.anatomy import Anatomy
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.families import assert_greedy_equals_generate
from tests.hybrid_families import HYBRIDS, KINDS, hybrid_model

PROMPT = "The quick brown fox jumps over the lazy dog"
NEW = 4
ALL = list(HYBRIDS)
STATEFUL = ("state-space", "linear attention", "short convolution")  # kinds that keep state
_runs: dict[str, Any] = {}


def _run(name: str, tokenizer: Any) -> Any:
    """(engine, run) of a finished greedy run of the family, built once."""
    if name not in _runs:
        engine = Engine(hybrid_model(name, tokenizer))
        prompt = engine.tokenize(PROMPT, chat=False)
        run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=NEW))
        run.run_all()
        _runs[name] = engine, run
    return _runs[name]


@pytest.mark.parametrize("name", ALL)
def test_each_layer_names_its_mixer(tokenizer: Any, name: str) -> None:
    engine, _run_ = _run(name, tokenizer)
    anatomy = Anatomy.of(engine.model)
    assert anatomy.kinds == KINDS[name] == engine.info.layer_kinds
    for i, kind in enumerate(anatomy.kinds):
        parts = kind.split(" + ")
        softmax = [p for p in parts if p.endswith("attention") and p != "linear attention"]
        assert anatomy.has_attention(i) == bool(softmax)
        assert engine.info.has_attention(i) == anatomy.has_attention(i)
        assert any(m is anatomy.mixers[i] for m in anatomy.layers[i].modules())
        has_state = any(p in STATEFUL for p in parts)
        assert (anatomy.state_mixers[i] is not None) == has_state


@pytest.mark.parametrize("name", ALL)
def test_greedy_tokens_and_logits_equal_generate(tokenizer: Any, name: str) -> None:
    engine, run = _run(name, tokenizer)
    assert_greedy_equals_generate(engine, run)


@pytest.mark.parametrize("name", ALL)
def test_layers_without_attention_have_empty_rows(tokenizer: Any, name: str) -> None:
    """A Mamba, DeltaNet or convolution layer records no attention (its rows stay zero); an
    attention layer's row is a distribution over the keys for every head."""
    engine, run = _run(name, tokenizer)
    for step in run.steps:
        for layer in range(engine.info.num_layers):
            sums = step.attention[layer].sum(-1)  # (heads,)
            if engine.info.has_attention(layer):
                np.testing.assert_allclose(sums, 1.0, atol=1e-5)
            else:
                assert not step.attention[layer].any()


@pytest.mark.parametrize("name", ALL)
def test_cache_bytes_equal_the_formula_growing_and_constant_apart(
    tokenizer: Any, name: str
) -> None:
    """Measured = formula at every step; the conv/recurrent state is there exactly where a
    layer is not only attention and does not grow; the K/V grow by one token's worth a step."""
    engine, run = _run(name, tokenizer)
    info, kinds = engine.info, engine.info.layer_kinds
    stateful = [i for i, k in enumerate(kinds) if any(p in STATEFUL for p in k.split(" + "))]
    state = run.steps[0].kv.state_bytes
    assert (state > 0) == bool(stateful)
    for step in run.steps:
        kv = step.kv
        assert kv.bytes_total == kv.formula_bytes
        assert kv.state_bytes == kv.state_formula_bytes == state
        held = () if kv.state_per_layer is None else np.flatnonzero(kv.state_per_layer)
        assert set(held) == set(stateful)
        kv_layers = [i for i in range(info.num_layers) if info.has_attention(i)]
        assert set(np.flatnonzero(kv.per_layer.sum(1))) == set(kv_layers)
    growth = np.diff([s.kv.growing_bytes for s in run.steps]).tolist()
    if not any(w for w in run.steps[-1].kv.windows):
        latent = info.latent_dims or (0,) * info.num_layers
        per_token = info.dtype_bytes * sum(
            lat or 2 * info.num_kv_heads * d
            for d, lat in zip(info.layer_head_dims, latent, strict=True)
        )  # a latent layer holds its latent once a token, not per-head K/V
        assert growth == [per_token] * (len(run.steps) - 1)


@pytest.mark.parametrize("name", ALL)
def test_last_lens_row_is_the_models_output(tokenizer: Any, name: str) -> None:
    """Through the model's own tail: Cohere's ``logit_scale`` and Falcon-H1's
    ``lm_head_multiplier`` are in it without the lens naming them."""
    engine, run = _run(name, tokenizer)
    for step in run.steps:
        with torch.inference_mode():
            lens = layers.lens_logits(engine, torch.from_numpy(np.array(step.hidden)))
        assert lens.shape == (engine.info.num_layers + 1, step.logits.shape[0])
        scale = np.abs(step.logits).max()
        np.testing.assert_allclose(lens[-1].numpy(), step.logits, atol=1e-5 * scale)
    assert layers.logit_lens(engine, run.steps[0]).top_ids[-1, 0] == run.steps[0].top_ids[0]
    prompt = layers.prompt_lens(engine, run.prefill.hidden)
    assert prompt.top1_ids.shape == (engine.info.num_layers + 1, len(run.prompt))


def test_the_scales_the_lens_does_not_name_change_the_output(tokenizer: Any) -> None:
    """Control: Cohere's and Falcon-H1's scales really change the logits, so the test above
    would fail for a lens that applied only the final norm and the head."""
    for name in ("cohere", "falcon_h1"):
        engine, run = _run(name, tokenizer)
        a, step = engine.anatomy, run.steps[0]
        with torch.inference_mode():
            bare = a.lm_head(a.final_norm(torch.from_numpy(np.array(step.hidden[-1])))).numpy()
        assert not np.allclose(bare, step.logits, atol=1e-3 * np.abs(step.logits).max())


def test_a_session_keeps_the_constant_state_and_an_unsplit_explanation(
    tokenizer: Any, tmp_path: Any
) -> None:
    """A hybrid's saved run reopens with its conv/recurrent state apart from its K/V, and its
    "Why this token?" (gradient × input and the one-line reason) as computed."""
    from llm_lens.core.explain.attribution import explain
    from llm_lens.core.sessions.explained import with_explanations
    from llm_lens.core.sessions.format import Session, session_from_run
    from llm_lens.core.sessions.read import load_session
    from llm_lens.core.sessions.views import RecordedAnalysis
    from llm_lens.core.sessions.write import save_session

    engine, run = _run("lfm2", tokenizer)
    x = explain(engine, run.steps[1])
    assert x.logits.unsplit.startswith("layer 0 is a short convolution layer")
    assert x.inputs.values.any() and not x.graph.weight.size
    from llm_lens.core.cards.attribution import attribution_card

    card = attribution_card(x).headline
    assert "not split: layer 0 is a short convolution layer" in card and "MLPs" not in card
    saved = with_explanations(session_from_run(run, engine.info), {(1, None): x})
    path = tmp_path / "hybrid.llmlens"
    save_session(path, Session(engine.info.as_dict(), (saved,)))
    back = load_session(path).runs[0]
    for want, got in zip(run.steps, back.steps, strict=True):
        assert got.kv.state_bytes == want.kv.state_bytes > 0
        assert got.kv.state_formula_bytes == want.kv.state_formula_bytes
        np.testing.assert_array_equal(got.kv.state_per_layer, want.kv.state_per_layer)
        assert got.kv.growing_bytes == want.kv.growing_bytes
    again = RecordedAnalysis(back).get("explain", {"step": 1, "vs": None})
    assert again.logits.unsplit == x.logits.unsplit
    np.testing.assert_array_equal(again.inputs.values, x.inputs.values)


@pytest.mark.parametrize("name", ["deepseek_v3", "cohere"])
def test_why_this_token_gradient_is_the_same_pass_split_or_not(tokenizer: Any, name: str) -> None:
    """The unsplit explanation's gradient × input (the model's own pass, no hooks) equals the
    split one's on a family that splits; latent attention says why it does not split."""
    from llm_lens.core.explain.attribution import explain
    from llm_lens.core.explain.partial import gradient_pass

    engine, run = _run(name, tokenizer)
    step = run.steps[-1]
    x = explain(engine, step)
    logits, gxi = gradient_pass(engine, list(step.context_ids), step.token.id)
    np.testing.assert_allclose(gxi.numpy(), x.inputs.values, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(logits.numpy(), step.logits, atol=1e-4 * np.abs(step.logits).max())
    assert bool(x.logits.unsplit) == (name == "deepseek_v3")
    if name == "deepseek_v3":
        assert "latent attention" in x.logits.unsplit and "\n" not in x.logits.unsplit


def test_an_attention_the_app_cannot_reproduce_runs_as_the_models_own(
    tokenizer: Any, monkeypatch: Any
) -> None:
    """Without the indexer's selection folded in, the app's attention function would read every
    key of DeepSeek-V3.2's sparse attention: the load-time check sees the logits differ, the
    model keeps its own attention (its tokens still generate()'s) and the Attention pane gets
    one line instead of maps; with the selection folded in, the maps are the model's."""
    import llm_lens.core.attention.lens as lens
    from llm_lens.core.attention import verdicts
    from llm_lens.core.loading import LoadedModel

    loaded = hybrid_model("deepseek_v32", tokenizer)
    assert Engine(LoadedModel(loaded.model, tokenizer, loaded.info)).attention_maps
    monkeypatch.setattr(lens, "selected_keys_mask", lambda mask, _i, _q, _k: mask)
    monkeypatch.setattr(verdicts, "_VERDICTS", {})  # the same weights, checked again
    fresh = LoadedModel(loaded.model, tokenizer, loaded.info)
    engine = Engine(fresh)
    assert not engine.attention_maps and engine.model.config._attn_implementation == "eager"
    assert "does not reproduce" in engine.info.attention_note == fresh.info.attention_note
    run = engine.start(engine.tokenize(PROMPT, chat=False), GREEDY, RunConfig(max_new_tokens=NEW))
    run.run_all()
    prompt = torch.tensor([run.prompt.ids])
    with torch.inference_mode():
        ref = engine.model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                    max_new_tokens=NEW, do_sample=False)  # fmt: skip
    assert run.generated_ids == ref[0, len(run.prompt) :].tolist()
    monkeypatch.undo()
    assert Engine(LoadedModel(loaded.model, tokenizer, loaded.info)).attention_maps
