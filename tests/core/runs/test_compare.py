"""Shared-prefill comparisons, branching, prefix reuse and beam search against references.

References are independent: separate ``engine.start`` runs, fresh runs over the same tokens, a
plain uncached forward of the model, and transformers' own ``generate(num_beams=...)``.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from llm_lens.core.cli.compare import main as main_compare
from llm_lens.core.cli.compare import parse_config
from llm_lens.core.errors import PromptError, SamplingError
from llm_lens.core.loop.engine import RunConfig, RunStart
from llm_lens.core.records import PromptTokens
from llm_lens.core.runs.beam import BeamSearch, beam_search
from llm_lens.core.runs.branching import BranchTree, alternatives, branch
from llm_lens.core.runs.compare import (
    KL_EPS,
    Comparison,
    compare,
    divergence_step,
    kl_divergence,
    mean_overlap,
    mean_pairwise_kl,
    samples,
)
from llm_lens.core.runs.prefix import PrefixCache, ttft_saved_ms
from llm_lens.core.sampling import GREEDY, SamplingParams

PROMPT = "Explain transformers like I am 12"


def _kl(p, q):
    """KL(p ‖ q) written out term by term, as documented."""
    return sum(
        a * (math.log(a + KL_EPS) - math.log(b + KL_EPS))
        for a, b in zip(p, q, strict=True)
        if a > 0
    )


def _close(actual, ref, rel=1e-4):
    ref = np.asarray(ref)
    assert np.abs(np.asarray(actual) - ref).max() <= rel * np.abs(ref).max()


def _extended(engine, prompt, extra):
    tokens = prompt.tokens + tuple(engine.texts.info(int(i)) for i in extra)
    return PromptTokens(prompt.text, prompt.rendered, prompt.chat, tokens)


# --- constructed distributions: exact values ------------------------------------------------------


def test_kl_and_overlap_on_handmade_distributions():
    p, q, r = [0.5, 0.5, 0.0], [0.25, 0.25, 0.5], [0.0, 0.0, 1.0]
    assert kl_divergence(np.array(p), np.array(q)) == pytest.approx(math.log(2), rel=1e-9)
    # q puts 0.5 where p has nothing: ε keeps it finite, ~0.5 · ln(0.5 / 1e-12)
    assert kl_divergence(np.array(q), np.array(p)) == pytest.approx(_kl(q, p), rel=1e-12)
    assert _kl(q, p) == pytest.approx(-0.5 * math.log(2) + 0.5 * math.log(0.5 / 1e-12), rel=1e-9)
    assert kl_divergence(np.array(p), np.array(p)) == pytest.approx(0.0, abs=1e-15)
    dists = [np.array(d) for d in (p, q, r)]
    pairs = [(a, b) for a in (p, q, r) for b in (p, q, r) if a is not b]
    assert len(pairs) == 6
    expected = sum(_kl(a, b) for a, b in pairs) / 6
    assert mean_pairwise_kl(dists) == pytest.approx(expected, rel=1e-12)
    assert mean_overlap(dists[:2]) == pytest.approx(0.5)
    assert mean_overlap(dists) == pytest.approx((0.5 + 0.0 + 0.5) / 3)
    assert mean_overlap([dists[0], dists[0]]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ([[1, 2, 3], [1, 2, 4]], 2),
        ([[1, 2, 3], [1, 2, 3]], None),
        ([[1, 2], [1, 2, 5]], None),
        ([[7], [8]], 0),
        ([[1, 2, 3], [1, 2, 3], [1, 9, 3]], 1),
    ],
)
def test_divergence_step(tokens, expected):
    assert divergence_step(tokens) == expected


def _fake_run(tokens, dists, params):
    steps = [
        SimpleNamespace(logits=np.log(np.array(d, np.float32)), context_ids=np.arange(3 + i))
        for i, d in enumerate(dists)
    ]
    return SimpleNamespace(generated_ids=tokens, steps=steps, params=params)


def _sym(p, q):
    return (_kl(p, q) + _kl(q, p)) / 2


def test_comparison_curves_score_every_text_under_every_setting():
    p0, p1, p2 = [0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]
    top1 = SamplingParams(temperature=1.0, top_k=1, top_p=1.0)  # final: one-hot on the argmax
    a = _fake_run([0, 1, 2, 0], [p0, p1, p2, p0], GREEDY)  # greedy's final stage is the raw one
    b = _fake_run([0, 1, 1], [p0, p2, p1], top1)
    comp = Comparison(prompt=None, runs=[a, b], shared_prefill_ms=12.5)
    assert comp.divergence_step == 2
    assert comp.prefill_saved_ms == 12.5
    kl, overlap = comp.kl_per_step, comp.overlap_per_step
    own_kl, own_overlap = comp.own_kl_per_step, comp.own_overlap_per_step
    assert len(kl) == len(overlap) == len(own_kl) == len(own_overlap) == 4  # every step
    onehot = {0: [1, 0, 0], 1: [0, 1, 0], 2: [0, 0, 1]}

    def raw(p):
        return [float(x) for x in np.float32(p)]  # the fake logits are float32

    def top(p):
        return onehot[int(np.argmax(p))]

    def ov(p, q):
        return sum(min(x, y) for x, y in zip(p, q, strict=True))

    texts = {0: (p0, p0), 1: (p1, p2), 2: (p2, p1)}
    for i, (pa, pb) in texts.items():
        # each text under both settings, averaged over the two texts
        want = (_sym(raw(pa), top(pa)) + _sym(raw(pb), top(pb))) / 2
        assert kl[i] == pytest.approx(want, rel=1e-5)
        assert overlap[i] == pytest.approx((ov(raw(pa), top(pa)) + ov(raw(pb), top(pb))) / 2)
        # each column's own distribution on its own text
        assert own_kl[i] == pytest.approx(_sym(raw(pa), top(pb)), rel=1e-5)
        assert own_overlap[i] == pytest.approx(ov(raw(pa), top(pb)), rel=1e-5)
    # step 3: only column a reached it: its text under both settings; no pair of own dists
    assert kl[3] == pytest.approx(_sym(raw(p0), top(p0)), rel=1e-5)
    assert math.isnan(own_kl[3]) and math.isnan(own_overlap[3])
    assert kl[0] == own_kl[0] and overlap[0] == own_overlap[0]  # one shared text at step 0
    assert overlap[0] == pytest.approx(0.5, rel=1e-5)


def test_comparison_of_equal_settings_is_zero_on_the_same_text():
    p, q = [0.25, 0.75], [0.5, 0.5]
    runs = [_fake_run([1, 1], [p, p], GREEDY), _fake_run([1, 0], [p, q], GREEDY)]
    comp = Comparison(None, [runs[0]] * 2 + [runs[1]], 2.0)
    assert comp.divergence_step == 1
    assert comp.kl_per_step == pytest.approx([0.0, 0.0], abs=1e-12)
    assert comp.overlap_per_step == pytest.approx([1.0, 1.0])
    # the own curve sees the third column's different text at step 1
    assert comp.own_kl_per_step[0] == pytest.approx(0.0, abs=1e-12)
    assert comp.own_kl_per_step[1] == pytest.approx(2 * 2 * _sym(p, q) / 6, rel=1e-5)
    assert comp.prefill_saved_ms == 4.0


def test_compare_and_samples_refuse_bad_counts(tiny_engine):
    prompt = tiny_engine.tokenize("hi", chat=False)
    with pytest.raises(SamplingError, match="at most four configurations"):
        compare(tiny_engine, prompt, [GREEDY] * 5, RunConfig(max_new_tokens=2))
    with pytest.raises(SamplingError, match="at least two"):
        compare(tiny_engine, prompt, [GREEDY], RunConfig(max_new_tokens=2))
    with pytest.raises(SamplingError, match="between 1 and 16"):
        samples(tiny_engine, prompt, GREEDY, 17, 0, RunConfig(max_new_tokens=2))


def test_start_from_refuses_a_cache_that_does_not_fit(tiny_engine):
    prompt = tiny_engine.tokenize("hello there", chat=False)
    state = tiny_engine.prefill(prompt)
    shorter = tiny_engine.tokenize("hello", chat=False)
    with pytest.raises(PromptError, match="does not fit"):
        tiny_engine.start_from(shorter, GREEDY, state.fork())
    with pytest.raises(PromptError, match="does not fit"):  # a prefix must leave a token to read
        tiny_engine.start_from(prompt, GREEDY, RunStart(state.fork().cache))


def test_samples_use_consecutive_seeds_and_equal_separate_runs(tiny_engine):
    prompt = tiny_engine.tokenize("Once upon a time", chat=False)
    params = SamplingParams(temperature=1.5, top_p=1.0, seed=0)
    config = RunConfig(max_new_tokens=6)
    comp = samples(tiny_engine, prompt, params, 4, 10, config)
    assert [r.params.seed for r in comp.runs] == [10, 11, 12, 13]
    for run in comp.runs:
        alone = tiny_engine.start(prompt, run.params, config)
        alone.run_all()
        assert run.generated_ids == alone.generated_ids
    assert len({tuple(r.generated_ids) for r in comp.runs}) > 1  # the seeds matter


def test_prefix_cache_leaves_one_token_to_read(tiny_engine):
    prompt = tiny_engine.tokenize("a b c d e f", chat=False)
    run = tiny_engine.start(prompt, GREEDY, RunConfig(max_new_tokens=3))
    run.run_all()
    cache = PrefixCache()
    cache.remember(run)
    assert cache.ids == prompt.ids + run.generated_ids[:-1]
    n, copy = cache.reuse(prompt.ids)
    assert n == len(prompt) - 1 and copy.get_seq_length() == n
    assert run.cache.get_seq_length() == len(prompt) + 2  # the stored cache is untouched
    assert cache.reuse([99999 % tiny_engine.info.vocab_size, *prompt.ids]) == (0, None)


# --- configuration strings and the CLI ----------------------------------------------------------


def test_parse_config_presets_and_keys():
    p = parse_config("temperature=0.2,top_p=0.95,seed=1")
    assert (p.temperature, p.top_p, p.seed, p.top_k, p.min_p) == (0.2, 0.95, 1, 0, 0.0)
    assert parse_config("greedy").is_greedy
    assert parse_config("top_k=0").active_stages() == []  # no filter at all
    creative = parse_config("creative, seed=3")
    assert (creative.temperature, creative.top_p, creative.seed) == (0.9, 0.9, 3)
    assert (parse_config("factual").temperature, parse_config("factual").top_p) == (0.2, 0.95)
    wild = parse_config("wild,min_p=0.05,repetition_penalty=1.1,top_k=40")
    assert (wild.temperature, wild.min_p, wild.repetition_penalty, wild.top_k) == (
        1.2,
        0.05,
        1.1,
        40,
    )


@pytest.mark.parametrize(
    ("configs", "needle"),
    [
        (["temperature=-1", "greedy"], "temperature"),
        (["top_p=1.5", "greedy"], "top-p"),
        (["top_k=-1", "greedy"], "top-k"),
        (["top_k=2.5", "greedy"], "whole number"),
        (["colour=red", "greedy"], "unknown key 'colour'"),
        (["boring", "greedy"], "unknown preset 'boring'"),
        (["greedy"] * 5, "at most four configurations"),
        (["greedy"], "at least two"),
        ([",", "greedy"], "empty"),
    ],
)
def test_compare_cli_errors_are_one_line(configs, needle, capsys):
    argv = ["hi", "--quiet"] + [a for c in configs for a in ("--config", c)]
    assert main_compare(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("llm-lens compare: error:")
    assert needle in err[0]


# --- the real model ----------------------------------------------------------------------------


CONFIGS = [
    SamplingParams(temperature=0.9, top_p=0.9, seed=1),
    SamplingParams(temperature=1.3, top_k=40, top_p=1.0, seed=2),
    GREEDY,
]


@pytest.mark.slow
def test_shared_prefill_equals_separate_runs(engine):
    prompt = engine.tokenize(PROMPT)
    config = RunConfig(max_new_tokens=12)
    comp = compare(engine, prompt, CONFIGS, config)
    assert comp.shared_prefill_ms > 0
    assert comp.prefill_saved_ms == pytest.approx(2 * comp.shared_prefill_ms)
    assert len({id(r.cache) for r in comp.runs}) == 3
    for run in comp.runs:
        alone = engine.start(prompt, run.params, config)
        alone.run_all()
        assert run.generated_ids == alone.generated_ids and len(run.steps) == 12
        for mine, ref in zip(run.steps, alone.steps, strict=True):
            np.testing.assert_array_equal(mine.logits, ref.logits)
            np.testing.assert_array_equal(mine.context_ids, ref.context_ids)
        np.testing.assert_array_equal(run.prefill.hidden, alone.prefill.hidden)
        assert run.steps[0].timing.forward_ms == comp.shared_prefill_ms
        assert run.steps[0].kv.bytes_total == alone.steps[0].kv.bytes_total
    tokens = [r.generated_ids for r in comp.runs]
    d = comp.divergence_step
    assert d is not None and len({t[d] for t in tokens}) > 1
    assert all(len({t[i] for t in tokens}) == 1 for i in range(d))
    assert len(comp.kl_per_step) == len(comp.overlap_per_step) == 12  # one point per step
    assert all(k >= 0 for k in comp.kl_per_step) and comp.kl_per_step[0] > 0
    assert all(0 <= o <= 1 + 1e-9 for o in comp.overlap_per_step)
    for run, col in zip(comp.runs, comp.columns(), strict=True):
        mean = np.mean([s.logprob for s in run.steps])
        assert col.mean_logprob == pytest.approx(mean) and col.length == 12
        assert col.perplexity == pytest.approx(math.exp(-mean)) and col.finish_reason == "length"
        assert col.tokens_per_s > 0


@pytest.mark.slow
def test_branch_equals_a_fresh_run_over_the_same_prefix(engine, greedy_run):
    s = 3
    step = greedy_run.steps[s]
    alts = alternatives(step, 5)
    assert [a.token_id for a in alts] == [int(i) for i in np.argsort(-step.logits)[:5]]
    assert alts[0].chosen and not any(a.chosen for a in alts[1:])
    raw = torch.softmax(torch.tensor(step.logits), -1)
    for a in alts:  # greedy: the final stage is the raw distribution
        assert a.prob == pytest.approx(float(raw[a.token_id]), rel=1e-5)
        assert a.final_prob == pytest.approx(a.prob, rel=1e-5)
    top2 = alternatives(step, 5, SamplingParams(temperature=1.0, top_k=2, top_p=1.0))
    assert sum(a.final_prob for a in top2[:2]) == pytest.approx(1.0)
    assert all(a.final_prob == 0.0 for a in top2[2:])

    forced = alts[1].token_id
    keys_before = greedy_run.cache.layers[0].keys.clone()
    child = branch(engine, greedy_run, s, forced, GREEDY, RunConfig(max_new_tokens=6))
    child.run_all()
    assert greedy_run.cache.get_seq_length() == len(greedy_run.prompt) + 7  # original untouched
    assert torch.equal(greedy_run.cache.layers[0].keys, keys_before)
    prefix = greedy_run.generated_ids[:s] + [forced]
    fresh = engine.start(_extended(engine, greedy_run.prompt, prefix), GREEDY, RunConfig(6))
    fresh.run_all()
    assert child.generated_ids == fresh.generated_ids
    assert child.steps[0].position == len(greedy_run.prompt) + s
    assert child.prefill.positions.tolist() == [len(greedy_run.prompt) + s]
    for mine, ref in zip(child.steps, fresh.steps, strict=True):
        _close(mine.logits, ref.logits)


@pytest.mark.slow
def test_branch_tree_nodes_and_cumulative_logprob(loaded, engine, greedy_run):
    tree = BranchTree(greedy_run)
    child = tree.branch(
        engine,
        greedy_run,
        2,
        int(greedy_run.steps[2].top_ids[1]),
        GREEDY,
        RunConfig(max_new_tokens=4),
    )
    child.run_all()
    grand = tree.branch(
        engine, child, 1, int(child.steps[1].top_ids[2]), GREEDY, RunConfig(max_new_tokens=3)
    )
    grand.run_all()
    nodes = tree.nodes()
    assert [n.run_id for n in nodes] == [greedy_run.run_id, child.run_id, grand.run_id]
    assert [n.parent_run_id for n in nodes] == [None, greedy_run.run_id, child.run_id]
    assert [n.depth for n in nodes] == [0, 1, 2] and [n.offset for n in nodes] == [0, 3, 5]
    assert [n.branch_step for n in nodes] == [None, 2, 1]
    assert nodes[2].forced_token.id == int(child.steps[1].top_ids[2])
    # independent: one uncached forward over the whole path, summing each token's log-prob
    n_prompt = len(greedy_run.prompt)
    ctx = [int(i) for i in grand.steps[-1].context_ids] + [grand.generated_ids[-1]]
    loaded.model.set_attn_implementation("eager")
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([ctx]), use_cache=False).logits[0].double()
    logp = torch.log_softmax(logits, -1)
    ref = sum(float(logp[i - 1, ctx[i]]) for i in range(n_prompt, len(ctx)))
    assert len(ctx) - n_prompt == 5 + 3
    assert nodes[2].cumulative_logprob == pytest.approx(ref, abs=1e-3)
    assert nodes[0].cumulative_logprob == pytest.approx(sum(s.logprob for s in greedy_run.steps))


@pytest.mark.slow
def test_prefix_reuse_equals_a_run_without_reuse(engine):
    first = engine.start(engine.tokenize(PROMPT), GREEDY, RunConfig(max_new_tokens=4))
    first.run_all()
    cache = PrefixCache()
    cache.remember(first)
    edited = engine.tokenize("Explain transformers like I am 5, please")
    common = next(
        i for i, (a, b) in enumerate(zip(first.prompt.ids, edited.ids, strict=False)) if a != b
    )
    reused, info = cache.start(engine, edited, GREEDY, RunConfig(max_new_tokens=6))
    reused.run_all()
    full = engine.start(edited, GREEDY, RunConfig(max_new_tokens=6))
    full.run_all()
    assert info.tokens_reused == common > 20 and info.suffix_tokens == len(edited) - common
    assert reused.prefill.positions.tolist() == list(range(common, len(edited)))
    assert reused.generated_ids == full.generated_ids
    for mine, ref in zip(reused.steps, full.steps, strict=True):
        _close(mine.logits, ref.logits)
    saved = ttft_saved_ms(full, reused)
    assert math.isfinite(saved)
    print(f"prefix reuse: {common} of {len(edited)} tokens reused, TTFT saved {saved:.1f} ms")


def _generate(loaded, prompt, **kw):
    loaded.model.set_attn_implementation("eager")
    with torch.inference_mode():
        out = loaded.model.generate(
            torch.tensor([prompt.ids]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            num_return_sequences=1,
            output_scores=True,
            return_dict_in_generate=True,
            **kw,
        )
    return out.sequences[0, len(prompt) :].tolist(), float(out.sequences_scores[0])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "beams", "new", "length_penalty", "early"),
    [
        (PROMPT, 2, 12, 1.0, False),
        (PROMPT, 4, 12, 1.0, False),
        ("What is 2+2? Answer with one number only.", 4, 16, 1.0, True),  # ends on EOS
    ],
)
def test_beam_search_equals_generate(loaded, engine, text, beams, new, length_penalty, early):
    prompt = engine.tokenize(text)
    result = beam_search(engine, prompt, beams, new, length_penalty, early)
    ids, score = _generate(
        loaded,
        prompt,
        num_beams=beams,
        max_new_tokens=new,
        length_penalty=length_penalty,
        early_stopping=early,
    )
    assert list(result.token_ids) == ids
    assert result.score == pytest.approx(score, rel=1e-5)
    assert result.finish_reason == "done" and result.text == engine.texts.join(ids)
    for step in result.steps:
        assert len(step.beams) == len(step.scores) == beams
        assert len(step.candidates) == 2 * beams  # one EOS id: keep 2·B continuations
        cand = [c.score for c in step.candidates]
        assert cand == sorted(cand, reverse=True)
        live = [c.score for c in step.candidates if c.fate == "live"]
        if step.index < len(result.steps) - 1:  # at the last step every candidate may stop
            assert sorted(live, reverse=True) == pytest.approx(list(step.scores))
        assert all(len(b) == step.index + 1 for b in step.beams)
        assert set(step.parents) <= set(range(beams))
        assert [h.score for h in step.finished] == sorted(
            [h.score for h in step.finished], reverse=True
        )
    if early:
        assert len(result.steps) < new and result.token_ids[-1] in engine.eos_ids
        assert any(c.fate == "finished" for s in result.steps for c in s.candidates)


def test_beam_search_refuses_bad_settings(tiny_engine):
    prompt = tiny_engine.tokenize("hi", chat=False)
    for beams in (1, 9):
        with pytest.raises(SamplingError, match="beams must be between 2 and 8"):
            BeamSearch(tiny_engine, prompt, beams, 4)
    with pytest.raises(SamplingError, match="early stopping"):
        BeamSearch(tiny_engine, prompt, 2, 4, early_stopping="sometimes")


@pytest.mark.slow
def test_compare_cli_writes_traces_and_metrics(tmp_path, engine, greedy_run):
    out = tmp_path / "compare.json"
    argv = [
        PROMPT,
        "--config",
        "greedy",
        "--config",
        "factual,seed=3",
        "--max-new-tokens",
        "4",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main_compare(argv) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["schema"] == "llm-lens-compare/2"
    assert [c["spec"] for c in data["configs"]] == ["greedy", "factual,seed=3"]
    assert data["configs"][1]["temperature"] == 0.2 and data["configs"][1]["seed"] == 3
    assert [t["schema"] for t in data["traces"]] == ["llm-lens-trace/1"] * 2
    greedy_ids = [s["token_id"] for s in data["traces"][0]["steps"]]
    assert greedy_ids == greedy_run.generated_ids[:4]
    assert data["prefill_saved_ms"] == pytest.approx(data["shared_prefill_ms"])
    for key in ("divergence_step", "kl_per_step", "overlap_per_step", "columns"):
        assert key in data
    d = data["divergence_step"]
    assert len(data["kl_per_step"]) == len(data["own_kl_per_step"]) == 4
    assert data["kl_per_step"][: (4 if d is None else d + 1)] == pytest.approx(
        data["own_kl_per_step"][: (4 if d is None else d + 1)]
    )


def test_a_saved_comparison_gives_the_same_metrics(tmp_path, tiny_engine):
    from llm_lens.core.runs.compare import Comparison
    from llm_lens.core.sessions.format import Session, SessionComparison, session_from_run
    from llm_lens.core.sessions.read import load_session
    from llm_lens.core.sessions.write import save_session

    prompt = tiny_engine.tokenize("Once upon a time", chat=False)
    comp = samples(tiny_engine, prompt, SamplingParams(temperature=1.5, top_p=1.0), 3, 4,
                   RunConfig(max_new_tokens=6))  # fmt: skip
    runs = tuple(session_from_run(r, tiny_engine.info) for r in comp.runs)
    saved = SessionComparison((0, 1, 2), comp.shared_prefill_ms)
    path = tmp_path / "compare.llmlens"
    save_session(path, Session(tiny_engine.info.as_dict(), runs, comparisons=(saved,)))
    session = load_session(path)
    assert session.comparisons == (saved,)
    again = Comparison.recorded([session.runs[i] for i in saved.runs], saved.shared_prefill_ms)
    assert again.params == comp.params and again.prompt == prompt
    assert again.divergence_step == comp.divergence_step
    # the file keeps logits as float16 (the top N exact): the curves agree to rounding
    assert again.kl_per_step == pytest.approx(comp.kl_per_step, rel=1e-4, abs=1e-9)
    assert again.overlap_per_step == pytest.approx(comp.overlap_per_step, rel=1e-4, abs=1e-6)
    assert again.own_kl_per_step == pytest.approx(comp.own_kl_per_step, rel=1e-4, nan_ok=True)
    assert again.columns() == comp.columns()
    from llm_lens.core.cli.inspect import describe

    ids = ", ".join(str(r.run_id) for r in comp.runs)
    assert f"compared  runs {ids} from one prefill" in describe(session)


def test_a_branch_path_reads_from_the_root(engine, greedy_run):
    from llm_lens.core.layers import logit_lens
    from llm_lens.core.runs.branching import PathRun

    root = PathRun.root(greedy_run)
    s, forced = 3, int(greedy_run.steps[3].top_ids[1])
    child = branch(engine, greedy_run, s, forced, GREEDY, RunConfig(max_new_tokens=3))
    child.run_id = 99
    path = PathRun.grown(root, root, s, forced, child)
    for record in child:
        path.add(record)
    steps = path.steps
    assert [st.index for st in steps] == list(range(len(steps))) and path.offset == s + 1
    assert [st.token.id for st in steps] == greedy_run.generated_ids[:s] + [forced] + [
        st.token.id for st in child.steps
    ]
    assert {st.run_id for st in steps} == {99}
    at = steps[s]  # the replaced step: same distribution, the forced token
    assert np.array_equal(at.logits, greedy_run.steps[s].logits) and at.finish_reason is None
    assert at.logprob == pytest.approx(
        float(torch.log_softmax(torch.tensor(at.logits, dtype=torch.float64), -1)[forced])
    )
    assert at.rank == 1
    lens = logit_lens(engine, steps[s + 1], 3)  # analyses take the path's steps as they are
    assert np.array_equal(lens.top_ids, logit_lens(engine, child.steps[0], 3).top_ids)
    assert list(path.summary().generated_ids) == [st.token.id for st in steps]
    assert path.cache is child.cache and path.prefill is greedy_run.prefill


def test_teacher_forced_distributions_equal_the_live_ones_on_the_shared_prefix(tiny_engine):
    """Every column's text scored under every column's settings: on the shared prefix the
    distributions are the live ones of the other columns; the step logits of a column are what
    one forward pass of the model over its tokens gives; the curves have one point per step."""
    from llm_lens.core.runs.compare import final_probs

    engine = tiny_engine
    prompt = engine.tokenize("Once upon a time", chat=False)
    configs = [SamplingParams(temperature=1.3, seed=1), SamplingParams(temperature=0.7, top_k=5,
               seed=2), GREEDY]  # fmt: skip
    comp = compare(engine, prompt, configs, RunConfig(max_new_tokens=8))
    d = comp.divergence_step
    assert d is not None and d < 7  # random tiny weights diverge early
    for text in comp.runs:  # one forward pass over the prompt and the column's tokens
        ids = torch.tensor([prompt.ids + text.generated_ids[:-1]])
        with torch.inference_mode():
            logits = engine.model(ids).logits[0, len(prompt) - 1 :].float().numpy()
        _close(logits, np.stack([s.logits for s in text.steps]), 1e-4)
    for i in range(d + 1):
        for text in comp.runs:
            for live in comp.runs:
                forced = final_probs(text.steps[i], live.params)
                np.testing.assert_allclose(forced, final_probs(live.steps[i], live.params),
                                           atol=1e-6)  # fmt: skip
    n = max(len(r.steps) for r in comp.runs)
    assert len(comp.kl_per_step) == len(comp.own_overlap_per_step) == n == 8
    assert comp.kl_per_step[: d + 1] == pytest.approx(comp.own_kl_per_step[: d + 1], rel=1e-6)
    assert comp.kl_per_step[d + 1] != pytest.approx(comp.own_kl_per_step[d + 1])
    # K samples of one setting: the same text scores the same under each: 0; the own curve not
    many = samples(
        engine, prompt, SamplingParams(temperature=1.5), 4, 3, RunConfig(max_new_tokens=6)
    )
    assert many.kl_per_step == pytest.approx([0.0] * 6, abs=1e-9)
    assert many.overlap_per_step == pytest.approx([1.0] * 6)
    assert len(many.own_kl_per_step) == 6 and max(many.own_kl_per_step) > 0
