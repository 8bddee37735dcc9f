"""The NDIF engine through nnsight's remote="local" backend (the trace serialised exactly as for
NDIF, run here) against the local engine: the same tokens and the same numbers per step."""

from __future__ import annotations

import numpy as np
import pytest

from llm_lens.core.engines.ndif import CaptureSpec, NdifEngine
from llm_lens.core.engines.ndif.records import full_activation_bytes
from llm_lens.core.layers import logit_lens
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY, SamplingParams
from tests.families import family_model

HEADS = ((3, 1), (20, 5))  # (layer, head) the user opened
PROMPT = "Explain transformers like I am 12"


@pytest.fixture(scope="module")
def ndif_run(loaded):
    """The greedy run of the conftest's ``greedy_run``, through the NDIF engine."""
    engine = NdifEngine.local(loaded)
    seen = []
    run = engine.start(
        engine.tokenize(PROMPT), GREEDY, RunConfig(max_new_tokens=8), spec=CaptureSpec(heads=HEADS),
        on_status=seen.append,
    )  # fmt: skip
    run.run_all()
    return run, seen


def test_tokens_and_distribution_equal_the_local_engine(ndif_run, greedy_run):
    run, _ = ndif_run
    assert [s.token.id for s in run.steps] == greedy_run.generated_ids
    assert run.finish_reason == greedy_run.finish_reason
    for a, b in zip(run.steps, greedy_run.steps, strict=True):
        assert (a.index, a.position, a.rank) == (b.index, b.position, b.rank)
        assert (a.prob, a.logprob) == (b.prob, b.logprob)  # bit-identical
        np.testing.assert_array_equal(a.top_ids, b.top_ids)
        np.testing.assert_array_equal(a.top_logits, b.top_logits)
        np.testing.assert_array_equal(a.top_probs, b.top_probs)
        assert a.entropy == pytest.approx(b.entropy, abs=1e-9)
        np.testing.assert_array_equal(a.context_ids, b.context_ids)
        assert a.kv.bytes_total == b.kv.bytes_total  # the formula equals the measured cache


def test_norms_lens_and_opened_heads_equal_the_local_engine(ndif_run, greedy_run, engine):
    run, _ = ndif_run
    for a, b, lens in zip(run.steps, greedy_run.steps, run.lenses, strict=True):
        assert a.hidden.shape[1] == 0  # the vectors never came back, only their norms
        np.testing.assert_allclose(a.norm_table(), b.norm_table(), rtol=2e-6, atol=1e-5)
        local = logit_lens(engine, b)
        np.testing.assert_array_equal(lens.top_ids, local.top_ids)
        np.testing.assert_allclose(lens.top_probs, local.top_probs, rtol=1e-5, atol=1e-7)
        for layer, head in HEADS:
            np.testing.assert_allclose(
                a.attention[layer, head], b.attention[layer, head], rtol=1e-4, atol=1e-6
            )
        opened = np.zeros(a.attention.shape[:2], bool)
        opened[tuple(zip(*HEADS, strict=True))] = True
        assert not a.attention[~opened].any()  # no other head was sent


def test_tail_keeps_the_mass_and_the_top_exact(ndif_run, greedy_run):
    """Without the whole distribution, the top-N are exact and the rest at their bin's level:
    the log-sum-exp (the probability mass at temperature 1) is the model's."""
    run, _ = ndif_run
    for a, b in zip(run.steps, greedy_run.steps, strict=True):
        assert a.tail_levels == a.logits.size - len(set(a.top_ids) | {a.token.id})
        np.testing.assert_array_equal(a.logits[a.top_ids], b.logits[b.top_ids])
        lse = lambda x: float(np.logaddexp.reduce(np.asarray(x, np.float64)))  # noqa: E731
        assert lse(a.logits) == pytest.approx(lse(b.logits), abs=1e-5)


def test_payload_per_step_is_bounded(ndif_run, loaded):
    """What comes back per step is a few kB, not the activations (0.7 MB a decode step here)."""
    run, _ = ndif_run
    per_step = run.payload_bytes / len(run.steps)
    assert 0 < per_step < 8_000
    assert per_step < full_activation_bytes(loaded.info, 1) / 50


def test_status_reports_the_job(ndif_run):
    _, seen = ndif_run
    assert [s.state for s in seen] == ["RECEIVED", "RUNNING", "COMPLETED"]
    assert seen[0].waiting and not seen[1].waiting


@pytest.mark.parametrize("name", ["mixtral", "qwen2", "gpt2", "gemma2", "mistral", "granite"])
def test_family_model_equals_the_local_engine(tokenizer, name):
    """A tiny seeded model: the whole logits when asked (bit-identical), router choices, an
    opened head's row (Gemma 2's soft-capping and window, Mistral's window)."""
    loaded = family_model(name, tokenizer)
    local = Engine(loaded)
    prompt = local.tokenize(PROMPT)
    want = local.start(prompt, GREEDY, RunConfig(max_new_tokens=5)).run_all()
    ndif = NdifEngine.local(loaded)
    spec = CaptureSpec(full_logits=True, heads=((1, 2),))
    got = ndif.start(prompt, GREEDY, RunConfig(max_new_tokens=5), spec=spec).run_all()
    assert [s.token.id for s in got] == [s.token.id for s in want]
    for a, b in zip(got, want, strict=True):
        assert a.tail_levels == 0
        np.testing.assert_array_equal(a.logits, b.logits)
        np.testing.assert_allclose(a.norm_table(), b.norm_table(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a.attention[1, 2], b.attention[1, 2], rtol=1e-4, atol=1e-6)
        assert (a.routing is None) == (b.routing is None) == (name != "mixtral")
        if a.routing is not None:
            np.testing.assert_array_equal(a.routing.experts, b.routing.experts)
            np.testing.assert_array_equal(a.routing.layers, b.routing.layers)
            assert a.routing.first_position == b.routing.first_position
            np.testing.assert_allclose(a.routing.probs, b.routing.probs, rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(a.routing.weights, b.routing.weights, rtol=1e-5)


def test_engine_speaks_the_engine_protocol(loaded, ndif_run):
    """Where core.engines' protocol is present: identity, provides and the server's lens."""
    base = pytest.importorskip("llm_lens.core.engines.base")
    engine = NdifEngine.local(loaded)
    assert isinstance(engine, base.ModelEngine)
    assert engine.identity.engine == "ndif" and engine.identity.url is None
    provides = engine.provides
    assert provides.has("lens") and not provides.has("residual")
    assert "NDIF" in provides.why_not("attention")
    run, _ = ndif_run
    step = run.steps[1]
    assert run.engine.logit_lens(step, k=2).top_ids.shape == (loaded.info.num_layers + 1, 2)


def test_hosted_engine_builds_the_skeleton_without_weights(tmp_path, tokenizer):
    """A model NDIF serves is built here on the meta device (no weights): its shapes, the parts
    the trace reads, and a remote backend holding the key (in memory) and the host."""
    from tests.families import family_config

    family_config("mixtral", len(tokenizer)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    engine = NdifEngine.hosted(str(tmp_path), "k-123", host="https://ndif.invalid")
    assert next(engine.hf_model.parameters()).device.type == "meta"
    assert engine.info.num_layers == 2 and engine.source == "ndif https://ndif.invalid"
    assert engine.info.device == "NDIF at ndif.invalid"  # the model line: where runs go
    targets = engine.targets(CaptureSpec(heads=((1, 0),)))
    assert len(targets.layers) == 2 and len(targets.routers) == 2 and 1 in targets.attention_calls
    engine.model.to_model_key = lambda: "TransformersModel:org/model"  # a Hub id's key
    backend = engine.backend(None)
    assert (backend.api_key, backend.host) == ("k-123", "https://ndif.invalid")


# what each family's forward does after the head, made large enough to move the distribution
TAILS = {
    "granite": ("granite", {}),  # logits_scaling 8
    "gemma2": ("gemma2", dict(final_logit_softcapping=0.5)),
    "opt": ("opt", dict(word_embed_proj_dim=16)),  # project_out (and project_in) around the layers
    "cohere": ("cohere", {}),  # logit_scale 0.25
    "falcon_h1": ("falcon_h1", {}),  # lm_head_multiplier 0.5
}
_tails: dict[str, object] = {}


def _tail_model(name, tokenizer):
    from tests.families import FAMILIES, family_config, seeded_model
    from tests.hybrid_families import hybrid_config

    def config_of(key, vocab):
        family, extra = TAILS[key]
        of = family_config if family in FAMILIES else hybrid_config
        config = of(family, vocab)
        for field, value in extra.items():
            setattr(config, field, value)
        return config

    return seeded_model(_tails, name, config_of, tokenizer)


@pytest.mark.parametrize("name", list(TAILS))
def test_lens_runs_the_model_s_own_tail(tokenizer, name):
    """The lens goes through OPT's projection and the scaling after the head (Granite's
    ``logits_scaling``, Gemma 2's soft-capping, Cohere's ``logit_scale``): its last row is the
    model's output and every row equals the local engine's lens (core.layers)."""
    loaded = _tail_model(name, tokenizer)
    local = Engine(loaded)
    prompt = local.tokenize(PROMPT)
    want = local.start(prompt, GREEDY, RunConfig(max_new_tokens=3)).run_all()
    ndif = NdifEngine.local(loaded)
    run = ndif.start(prompt, GREEDY, RunConfig(max_new_tokens=3))
    run.run_all()
    assert (name == "opt") == (ndif.targets(run.spec).project_out is not None)
    assert run.lens_gap < 1e-5
    for step, lens, b in zip(run.steps, run.lenses, want, strict=True):
        k = lens.top_ids.shape[1]
        assert step.token.id == b.token.id
        np.testing.assert_array_equal(lens.top_ids[-1], b.top_ids[:k])
        np.testing.assert_allclose(lens.top_probs[-1], b.top_probs[:k], rtol=1e-5, atol=1e-7)
        mine = logit_lens(local, b)
        np.testing.assert_array_equal(lens.top_ids, mine.top_ids)
        np.testing.assert_allclose(lens.top_probs, mine.top_probs, rtol=1e-5, atol=1e-7)


def test_lens_without_the_tail_misses_the_output(tokenizer):
    """The check can fail: without Granite's ``logits_scaling`` the last row is not the output."""
    ndif = NdifEngine.local(_tail_model("granite", tokenizer))
    assert ndif.head_scale == (("logits_scaling", 8.0),)
    ndif.head_scale = ()
    run = ndif.start(ndif.tokenize(PROMPT), GREEDY, RunConfig(max_new_tokens=1))
    run.run_all()
    assert run.lens_gap > 1e-3


def test_seeded_sampling_equals_the_local_engine(tokenizer):
    """The server's generate() is seeded inside the trace: the same seed draws the local
    engine's tokens (the server samples on the CPU here), another seed others."""
    loaded = family_model("qwen2", tokenizer)
    local, ndif = Engine(loaded), NdifEngine.local(loaded)
    prompt = local.tokenize(PROMPT)
    config = RunConfig(max_new_tokens=8)
    ids = {}
    for seed in (7, 8):
        params = SamplingParams(temperature=1.5, top_k=50, seed=seed)
        want = [s.token.id for s in local.start(prompt, params, config).run_all()]
        got = ndif.start(prompt, params, config).run_all()
        assert [s.token.id for s in got] == want
        assert all(s.approximate for s in got)  # stages from the tail levels
        ids[seed] = want
    assert ids[7] != ids[8]
    full = ndif.start(prompt, params, config, spec=CaptureSpec(full_logits=True)).run_all()
    assert not any(s.approximate for s in full)


def test_each_step_has_the_server_s_time(ndif_run):
    """Per-step time from the server's clock; the job's queue and transfer before step 0."""
    run, _ = ndif_run
    for step in run.steps:
        assert step.timing.forward_ms > 0 and step.timing.sample_ms > 0
        assert not step.timing.waits_measured
    assert all(s.timing.between_ms == 0 for s in run.steps[1:])
    total = sum(s.timing.total_ms for s in run.steps) + run.steps[0].timing.between_ms
    assert total == pytest.approx(run.wall_ms, rel=1e-6)
    assert run.engine.provides.has("timing") and run.engine.provides.approximate
