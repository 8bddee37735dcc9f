"""Continuing a run, and reviving a recorded one on the loaded model.

The reference for a continuation is a single longer run with the same settings: continuing
must generate exactly its tokens, seeded sampling included (the generator goes on too).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llm_lens.core.errors import PromptError
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.runs.branching import branch, continue_run
from llm_lens.core.runs.resume import revive
from llm_lens.core.sampling import GREEDY, SamplingParams
from llm_lens.core.sessions.format import Session, SessionError, session_from_run
from llm_lens.core.sessions.read import load_session
from llm_lens.core.sessions.write import save_session

PROMPT = "Explain transformers like I am 12"
SAMPLED = SamplingParams(temperature=1.3, top_k=0, top_p=1.0, seed=7)


def tokens(run):
    return [s.token.id for s in run.steps]


def finished(run):
    run.run_all()
    return run


def run_of(engine, params, n, text=PROMPT):
    run = engine.start(engine.tokenize(text), params, RunConfig(max_new_tokens=n))
    run.run_all()
    return run


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_continuing_equals_one_longer_run(engine, params):
    short, longer = run_of(engine, params, 5), run_of(engine, params, 10)
    assert short.finish_reason == "length"
    child = continue_run(engine, short, RunConfig(max_new_tokens=5))
    child.run_all()
    assert tokens(short) + tokens(child) == tokens(longer)
    for mine, ref in zip(child.steps, longer.steps[5:], strict=True):
        np.testing.assert_allclose(mine.logits, ref.logits, atol=1e-4 * np.abs(ref.logits).max())
    assert len(child.steps[0].context_ids) == len(longer.steps[5].context_ids)
    again = continue_run(engine, short, RunConfig(max_new_tokens=5))  # short is unchanged
    assert tokens(finished(again)) == tokens(child)


def test_continuing_refuses_a_run_that_cannot_go_on(tiny_engine):
    run = run_of(tiny_engine, GREEDY, 3)
    ended = dataclasses.replace(run, finish_reason="eos")
    with pytest.raises(PromptError, match="end-of-sequence"):
        continue_run(tiny_engine, ended, RunConfig())
    full = dataclasses.replace(run, finish_reason="context")
    with pytest.raises(PromptError, match="context"):
        continue_run(tiny_engine, full, RunConfig())
    empty = tiny_engine.start(tiny_engine.tokenize("hi"), GREEDY, RunConfig())
    with pytest.raises(PromptError, match="no steps"):
        continue_run(tiny_engine, empty, RunConfig())


def test_a_saved_run_revives_and_continues_exactly(tmp_path, engine):
    short, longer = run_of(engine, SAMPLED, 5), run_of(engine, SAMPLED, 10)
    path = tmp_path / "run.llmlens"
    save_session(path, Session(engine.info.as_dict(), (session_from_run(short, engine.info),)))
    recorded = load_session(path).runs[0]
    assert recorded.generator_state is not None

    revived = revive(engine, recorded)
    assert revived.matches
    assert revived.max_logit_diff < 1e-4 * revived.logit_scale
    run = revived.run
    assert run.cache.get_seq_length() == short.cache.get_seq_length()
    assert tokens(run) == tokens(short) and run.params == SAMPLED
    child = continue_run(engine, run, RunConfig(max_new_tokens=5))
    child.run_all()
    assert tokens(short) + tokens(child) == tokens(longer)


def test_a_revived_run_branches_like_the_live_one(engine, greedy_run):
    revived = revive(engine, session_from_run(greedy_run, engine.info))
    forced = int(greedy_run.steps[3].top_ids[1])
    live = branch(engine, greedy_run, 3, forced, GREEDY, RunConfig(max_new_tokens=4))
    again = branch(engine, revived.run, 3, forced, GREEDY, RunConfig(max_new_tokens=4))
    assert tokens(finished(live)) == tokens(finished(again))


def test_revive_reports_a_model_that_does_not_reproduce_the_recording(tiny_engine, loaded):
    from llm_lens.core.loop.engine import Engine
    from tests.conftest import make_tiny

    run = run_of(tiny_engine, GREEDY, 3)
    other = Engine(make_tiny(loaded.tokenizer, initializer_range=0.2))
    assert revive(tiny_engine, session_from_run(run, tiny_engine.info)).matches
    assert not revive(other, session_from_run(run, tiny_engine.info)).matches


def test_revive_refuses_recordings_it_cannot_rebuild(tiny_engine):
    run = run_of(tiny_engine, GREEDY, 3)
    recorded = session_from_run(run, tiny_engine.info)
    with pytest.raises(PromptError, match="no steps"):
        revive(tiny_engine, dataclasses.replace(recorded, steps=()))
    bad_state = dataclasses.replace(recorded, generator_state=np.zeros(7, np.uint8))
    with pytest.raises(PromptError, match="sampler state is damaged"):
        revive(tiny_engine, bad_state)
    other_prompt = dataclasses.replace(recorded, prompt=tiny_engine.tokenize("something else"))
    with pytest.raises(PromptError, match="inconsistent"):
        revive(tiny_engine, other_prompt)


def test_a_malformed_generator_state_is_refused_on_load(tmp_path, tiny_engine):
    run = run_of(tiny_engine, GREEDY, 2)
    recorded = dataclasses.replace(session_from_run(run, tiny_engine.info), generator_state=None)
    path = tmp_path / "old.llmlens"
    save_session(path, Session(tiny_engine.info.as_dict(), (recorded,)))
    assert load_session(path).runs[0].generator_state is None  # files without one still load
    two_d = dataclasses.replace(recorded, generator_state=np.zeros((2, 2), np.uint8))
    save_session(path, Session(tiny_engine.info.as_dict(), (two_d,)))
    with pytest.raises(SessionError, match="generator state"):
        load_session(path)
