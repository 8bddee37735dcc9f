"""The arithmetic the cards show: softmax written out, seeded draws replayed, head patterns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_lens.core.arithmetic import (
    draw_at,
    head_pattern,
    recorded_draw,
    softmax_steps,
    top_links,
)
from llm_lens.core.cards import logits_card, sampling_card
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY, SamplingParams


@pytest.fixture(scope="module")
def sampled_run(tiny_engine):
    params = SamplingParams(temperature=1.3, top_p=0.9, seed=11)
    prompt = tiny_engine.tokenize("The bank of the river", chat=False)
    run = tiny_engine.start(prompt, params, RunConfig(max_new_tokens=6))
    run.run_all()
    return run, params


def test_softmax_steps_equal_the_recorded_probabilities(sampled_run):
    run, _ = sampled_run
    step = run.steps[2]
    sm = softmax_steps(step, 5)
    assert [r.token_id for r in sm.rows] == [int(i) for i in step.top_ids[:5]]
    np.testing.assert_allclose([r.prob for r in sm.rows], step.top_probs[:5], rtol=1e-4)
    ref = torch.softmax(torch.from_numpy(np.array(step.logits)).double(), -1)
    np.testing.assert_allclose(sm.rows[0].prob, float(ref[step.top_ids[0]]), rtol=1e-9)
    assert sm.rows[0].shifted == 0.0 and sm.vocab == step.logits.shape[0]


def test_a_seeded_draw_replays_every_recorded_token(sampled_run):
    """The seed advanced by one draw per earlier step draws exactly what the run drew."""
    run, params = sampled_run
    for step in run.steps:
        assert draw_at(step, params).token_id == step.token.id
    other = params.with_(seed=12)
    drawn = [draw_at(s, other).token_id for s in run.steps]
    assert drawn != [s.token.id for s in run.steps]  # the seed matters


def test_a_draw_far_into_a_run_replays_its_token_however_the_generator_got_there(
    sampled_run, monkeypatch
):
    """Straight to the last step with nothing kept, advanced in chunks that do not divide the
    vocabulary, then back to an earlier step: each draws the recorded token."""
    from llm_lens.core import arithmetic

    run, params = sampled_run
    monkeypatch.setattr(arithmetic, "_ADVANCED", {})
    monkeypatch.setattr(arithmetic, "_CHUNK", 1000)
    for step in (run.steps[-1], run.steps[1], run.steps[-2]):
        assert draw_at(step, params).token_id == step.token.id


def test_draw_stages_follow_the_processors(sampled_run):
    run, params = sampled_run
    step = run.steps[1]
    draw = draw_at(step, params)
    assert [s.stage for s in draw.stages] == ["raw", "temperature", "top_p"]
    assert draw.stages[0].prob == pytest.approx(step.prob, rel=1e-5)
    greedy = draw_at(step, GREEDY)
    assert greedy.token_id == int(np.argmax(step.logits)) and greedy.greedy


def test_the_recorded_draw_is_the_replayed_draw(engine, greedy_run):
    """For the run's own settings (seeded or greedy) the cards read the loop's recorded stages
    instead of re-staging the logits: the same token, stages, kept counts and probabilities,
    and the same card texts. Where the drawn token is outside a stage's recorded top-n there is
    nothing recorded to read (None: the cards re-stage)."""
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, seed=5)
    prompt = engine.tokenize("Explain transformers like I am 12")
    seeded = engine.start(prompt, params, RunConfig(max_new_tokens=6))
    seeded.run_all()
    read = 0
    for steps, p in ((seeded.steps, params), (greedy_run.steps, GREEDY)):
        for step in steps:
            got, want = recorded_draw(step, p), draw_at(step, p)
            if got is None:
                assert p is params and not all(step.token.id in s.top_ids for s in step.stages)
                continue
            read += 1
            assert got.token_id == want.token_id == step.token.id
            assert [(s.stage, s.kept) for s in got.stages] == [
                (s.stage, s.kept) for s in want.stages
            ]
            np.testing.assert_allclose(
                [s.prob for s in got.stages], [s.prob for s in want.stages], rtol=1e-5, atol=1e-7
            )
            assert sampling_card(step, p, True)[0] == sampling_card(step, p)[0]
            assert logits_card(step, p, True) == logits_card(step, p)
    assert read >= len(greedy_run.steps) + len(seeded.steps) // 2
    assert recorded_draw(seeded.steps[1], params.with_(seed=None)) is None  # a fresh seed
    assert recorded_draw(seeded.steps[1], params.with_(top_p=1.0)) is None  # other stages


def test_head_pattern_names_a_sink_and_a_previous_token_head():
    n = 8
    sink = np.zeros((n, n))
    sink[:, 0] = 0.9
    for i in range(n):
        sink[i, 1 : i + 1] = 0.1 / max(i, 1)
    prev = np.zeros((n, n))
    prev[0, 0] = 1
    for i in range(1, n):
        prev[i, i - 1] = 0.8
        prev[i, i] = 0.2
    s, p = head_pattern(sink), head_pattern(prev)
    assert s.is_sink and not s.is_previous_token and "attention sink" in s.names()[0]
    assert p.is_previous_token and not p.is_sink
    assert p.previous == pytest.approx(0.8)
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    assert head_pattern(uniform).names() == []


def test_top_links_keep_the_strongest_and_count_the_rest():
    rng = np.random.default_rng(0)
    w = np.tril(rng.random((400, 400)))
    q, k, v, hidden = top_links(w, 500)
    assert len(v) == 500 and hidden == 400 * 401 // 2 - 500
    assert v.min() >= np.sort(w[np.tril_indices(400)])[-500]
    assert np.all(k <= q)


@pytest.mark.parametrize("n, limit", [(1000, 300), (50, 300), (300, 300), (6, 4)])
def test_top_links_are_the_strongest_causal_cells(n, limit):
    """The row-maximum shortcut finds exactly the cells a full sort of the causal cells finds,
    whatever lies above the diagonal; one query's form keeps only its row."""
    rng = np.random.default_rng(n)
    w = rng.random((n, n)).astype(np.float32) ** 8  # most cells small, a few strong
    w[rng.random((n, n)) < 0.2] = 0.0
    w[3, 1] = np.nan
    causal = np.nan_to_num(np.tril(w))
    q, k, v, hidden = top_links(w, limit)  # the upper triangle is noise here: never counted
    cells = np.argwhere(causal > 0)
    strongest = np.sort(causal[causal > 0])[::-1][:limit]
    assert np.array_equal(np.sort(v)[::-1], strongest.astype(np.float64))
    assert np.all(k <= q) and np.array_equal(v, causal[q, k]) and np.all(np.diff(v) >= 0)
    assert hidden == len(cells) - len(v) and len({*zip(q, k, strict=True)}) == len(v)
    row = n // 2
    q, k, v, hidden = top_links(w, 3, query=row)
    read = np.sort(causal[row][causal[row] > 0])
    assert np.all(q == row) and np.array_equal(v, read[-3:]) and hidden == len(read[:-3])


def test_logits_card_numbers_are_the_records(sampled_run):
    run, params = sampled_run
    step = run.steps[0]
    card = logits_card(step, params)
    z = float(step.logits[step.token.id])
    assert f"had logit {z:.1f}" in card.headline
    assert f"top-p {params.top_p:g} keeps" in card.headline
    assert f"z = {float(step.top_logits[0]):.2f}" in card.numbers[0]
    explainer, draw = sampling_card(step, params)
    assert draw.token_id == step.token.id and "the token the run chose" in explainer.headline
