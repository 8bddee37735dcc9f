"""Sampling stages against transformers' own logits processors, on random logits (no model).

Each stage of :func:`core.sampling.run_stages` must be exactly the processor it stands for,
applied in generate()'s order; the removed mass, greedy choice, seeded draws, validation and
summaries are checked against independent computations.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from llm_lens.core.errors import SamplingError
from llm_lens.core.sampling import (
    GREEDY,
    STAGE_ORDER,
    SamplingParams,
    choose,
    entropy,
    make_generator,
    restage,
    run_stages,
    summarize,
)

VOCAB = 1000
ALL_ON = SamplingParams(
    temperature=0.7, top_k=200, top_p=0.9, min_p=0.02, repetition_penalty=1.3, seed=5
)


def random_logits(seed: int = 0, scale: float = 3.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(VOCAB, generator=gen) * scale  # (vocab,)


def random_context(seed: int = 0, length: int = 40) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + 100)
    return torch.randint(0, VOCAB, (1, length), generator=gen)  # (1, seq)


def hf_processor(stage: str, p: SamplingParams):
    """The transformers processor for a stage, built here independently of core.sampling."""
    return {
        "repetition_penalty": lambda: RepetitionPenaltyLogitsProcessor(p.repetition_penalty),
        "temperature": lambda: TemperatureLogitsWarper(p.temperature),
        "top_k": lambda: TopKLogitsWarper(top_k=p.top_k),
        "top_p": lambda: TopPLogitsWarper(top_p=p.top_p),
        "min_p": lambda: MinPLogitsWarper(min_p=p.min_p),
    }[stage]()


PARAM_CASES = [
    ALL_ON,
    SamplingParams(temperature=1.3, top_k=0, top_p=0.5, min_p=0.0, repetition_penalty=1.0),
    SamplingParams(temperature=0.5, top_k=5, top_p=1.0, min_p=0.0, repetition_penalty=0.8),
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1, repetition_penalty=1.0),
    SamplingParams(temperature=0.9, top_k=1, top_p=0.95, min_p=0.05, repetition_penalty=2.0),
]


@pytest.mark.parametrize("params", PARAM_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_stage_equals_the_transformers_processor_chain(params, seed):
    logits, context = random_logits(seed), random_context(seed)
    stages = run_stages(logits, context, params)
    assert [s.name for s in stages] == ["raw", *params.active_stages()]
    scores = logits.reshape(1, -1).clone()
    assert torch.equal(stages[0].scores, scores)
    for stage in stages[1:]:
        scores = hf_processor(stage.name, params)(context, scores.clone())
        assert torch.equal(stage.scores, scores), stage.name
        assert torch.allclose(stage.probs, torch.softmax(scores, dim=-1), atol=0, rtol=0)


@pytest.mark.parametrize("params", PARAM_CASES)
def test_removed_plus_kept_mass_is_one_per_stage(params):
    logits, context = random_logits(7), random_context(7)
    stages = run_stages(logits, context, params)
    assert stages[0].removed_mass == 0.0
    for prev, stage in zip(stages, stages[1:], strict=False):
        finite = torch.isfinite(stage.scores)
        kept = float(prev.probs[finite].sum())
        assert stage.removed_mass + kept == pytest.approx(1.0, abs=1e-5), stage.name
        # the mass removed is exactly what the previous stage gave to the now-impossible tokens
        expected = float(prev.probs[~finite].sum())
        assert stage.removed_mass == pytest.approx(expected, abs=1e-7)
        if stage.name in ("repetition_penalty", "temperature"):
            assert stage.removed_mass == 0.0
    if params.top_p < 1.0 or params.top_k > 0:
        assert sum(s.removed_mass for s in stages) > 0.0


def test_top_k_one_leaves_a_single_token_with_all_the_mass():
    params = SamplingParams(temperature=1.0, top_k=1, top_p=1.0)
    stages = run_stages(random_logits(3), random_context(3), params)
    final = stages[-1]
    assert int(torch.isfinite(final.scores).sum()) == 1
    assert float(final.probs.max()) == pytest.approx(1.0)
    assert final.removed_mass == pytest.approx(1.0 - float(stages[0].probs.max()), abs=1e-6)


def test_greedy_picks_the_argmax_after_repetition_penalty():
    logits = random_logits(11)
    top2 = torch.topk(logits, 2).indices
    logits[top2[0]] = 10.0  # the raw winner ...
    logits[top2[1]] = 9.0
    context = torch.tensor([[int(top2[0]), 5, 6]])  # ... has already been read: penalised
    for params in (
        SamplingParams(temperature=0.0, top_p=1.0, repetition_penalty=2.0),
        SamplingParams(temperature=0.7, top_p=0.9, repetition_penalty=2.0, greedy=True),
    ):
        assert params.is_greedy
        assert params.active_stages() == ["repetition_penalty"]
        stages = run_stages(logits, context, params)
        penalised = RepetitionPenaltyLogitsProcessor(2.0)(context, logits.reshape(1, -1).clone())
        picked = choose(stages[-1], params, make_generator(params))
        assert picked == int(torch.argmax(penalised)) == int(top2[1])
    # without the penalty greedy takes the raw winner
    assert choose(run_stages(logits, context, GREEDY)[-1], GREEDY, None) == int(top2[0])


def test_seeded_sampler_reproduces_and_matches_torch_multinomial():
    params = ALL_ON.with_(top_k=0, top_p=1.0, min_p=0.0, temperature=1.5, seed=42)
    final = run_stages(random_logits(5), random_context(5), params)[-1]
    gen_a, gen_b = make_generator(params), make_generator(params)
    draws_a = [choose(final, params, gen_a) for _ in range(50)]
    draws_b = [choose(final, params, gen_b) for _ in range(50)]
    assert draws_a == draws_b
    ref_gen = torch.Generator().manual_seed(42)
    ref = [int(torch.multinomial(final.probs, 1, generator=ref_gen)[0, 0]) for _ in range(50)]
    assert draws_a == ref
    assert len(set(draws_a)) > 5  # a flat-ish distribution: really sampled, not argmax
    other = make_generator(params.with_(seed=43))
    assert [choose(final, params, other) for _ in range(50)] != draws_a
    # draws only ever land on tokens the stages kept
    nucleus = params.with_(top_p=0.5)
    kept_final = run_stages(random_logits(5), random_context(5), nucleus)[-1]
    gen = make_generator(nucleus)
    for _ in range(50):
        assert torch.isfinite(kept_final.scores[0, choose(kept_final, nucleus, gen)])


def test_unseeded_generator_is_fresh():
    params = ALL_ON.with_(seed=None)
    a = make_generator(params).initial_seed()
    b = make_generator(params).initial_seed()
    assert a != b


@pytest.mark.parametrize(
    ("changes", "name", "shown"),
    [
        ({"temperature": -0.1}, "temperature", "temperature=-0.1"),
        ({"temperature": math.nan}, "temperature", "temperature=nan"),
        ({"top_p": 1.01}, "top-p", "top_p=1.01"),
        ({"top_p": 0.0}, "top-p", "top_p=0.0"),
        ({"top_p": -0.5}, "top-p", "top_p=-0.5"),
        ({"min_p": 1.0}, "min-p", "min_p=1.0"),
        ({"min_p": -0.1}, "min-p", "min_p=-0.1"),
        ({"repetition_penalty": 0.0}, "repetition penalty", "repetition_penalty=0.0"),
        ({"repetition_penalty": -1.0}, "repetition penalty", "repetition_penalty=-1.0"),
        ({"top_k": -1}, "top-k", "top_k=-1"),
        ({"seed": -3}, "seed", "seed=-3"),
    ],
)
def test_out_of_range_settings_raise_sampling_error_naming_the_setting(changes, name, shown):
    with pytest.raises(SamplingError) as info:
        SamplingParams(**changes)
    message = str(info.value)
    assert message.startswith(name), message  # the failing setting first, not just listed
    assert shown in message
    with pytest.raises(SamplingError):
        ALL_ON.with_(**changes)  # replace() validates too


def test_boundary_settings_are_accepted():
    SamplingParams(temperature=0.0, top_p=1.0, min_p=0.0, top_k=0, seed=0)
    SamplingParams(top_p=1e-6, min_p=0.999, repetition_penalty=1e-3)


def test_active_stages_order_and_switches():
    assert ALL_ON.active_stages() == list(STAGE_ORDER)
    neutral = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    assert neutral.active_stages() == []
    assert neutral.with_(min_p=0.1, top_k=3).active_stages() == ["top_k", "min_p"]
    assert neutral.with_(top_p=0.8, temperature=0.5).active_stages() == ["temperature", "top_p"]
    assert GREEDY.active_stages() == []
    assert GREEDY.with_(top_k=5, top_p=0.5, min_p=0.2).active_stages() == []
    assert GREEDY.with_(repetition_penalty=1.1).active_stages() == ["repetition_penalty"]


def test_summarize_matches_independent_numbers():
    stages = run_stages(random_logits(9), random_context(9), ALL_ON)
    summaries = summarize(stages, 20)
    assert [s.name for s in summaries] == [s.name for s in stages]
    for stage, summary in zip(stages, summaries, strict=True):
        p = stage.probs[0].double().numpy()
        order = np.argsort(-p, kind="stable")[:20]
        np.testing.assert_array_equal(summary.top_ids, order)
        np.testing.assert_allclose(summary.top_probs, p[order], rtol=1e-6)
        assert summary.kept == int(np.count_nonzero(p))
        nz = p[p > 0]
        assert summary.entropy == pytest.approx(float(-(nz * np.log(nz)).sum()), rel=1e-9)
        assert summary.removed_mass == stage.removed_mass
        assert summary.top_ids.dtype == np.int64 and summary.top_probs.dtype == np.float32
        assert not summary.top_ids.flags.writeable and not summary.top_probs.flags.writeable
    assert summaries[0].kept == VOCAB
    assert summaries[-1].kept < summaries[0].kept
    assert summaries[-1].entropy < summaries[0].entropy


def test_summarize_top_n_larger_than_vocab():
    small = torch.tensor([1.0, 2.0, 3.0])
    (summary,) = summarize(run_stages(small, torch.tensor([[0]]), GREEDY), 10)
    assert list(summary.top_ids) == [2, 1, 0]


def test_entropy_of_known_distributions():
    assert entropy(torch.full((8,), 1 / 8)) == pytest.approx(math.log(8))
    assert entropy(torch.tensor([0.0, 1.0, 0.0])) == 0.0
    assert entropy(torch.tensor([0.5, 0.5, 0.0])) == pytest.approx(math.log(2))


@pytest.mark.parametrize("params", PARAM_CASES + [GREEDY])
def test_restage_equals_run_stages(params):
    logits, context = random_logits(4), random_context(4)
    expected = summarize(run_stages(logits, context, params), 15)
    np_logits = logits.numpy().copy()
    np_logits.setflags(write=False)  # recorded logits are read-only
    got = restage(np_logits, context.numpy()[0], params, top_n=15)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert (a.name, a.kept, a.removed_mass, a.entropy) == (
            b.name,
            b.kept,
            b.removed_mass,
            b.entropy,
        )
        np.testing.assert_array_equal(a.top_ids, b.top_ids)
        np.testing.assert_array_equal(a.top_probs, b.top_probs)


def test_a_staging_is_shared_between_its_askers_and_equals_a_fresh_one():
    """The Sampling pane, its card and the Logits card ask for the same (step, settings):
    the first computes it, the others read the same results; other settings re-stage."""
    from types import SimpleNamespace

    from llm_lens.core.sampling import SamplingParams, staged, stages_of

    rng = np.random.default_rng(0)
    step = SimpleNamespace(
        logits=rng.normal(size=500).astype(np.float32), context_ids=np.array([3, 4, 5])
    )
    params = SamplingParams(temperature=0.7, top_k=20, repetition_penalty=1.3)
    first = staged(step, params)
    assert staged(step, params) is first
    fresh = stages_of(step.logits, step.context_ids, params)
    for a, b in zip(first, fresh, strict=True):
        assert a.name == b.name
        torch.testing.assert_close(a.probs, b.probs)
    other = staged(step, params.with_(top_k=5))
    assert other is not first and int((other[-1].probs > 0).sum()) <= 5
