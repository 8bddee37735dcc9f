"""An intervened run's interventions travel with it: a continuation or branch keeps them (and
equals a fresh intervened run), prefix reuse never takes a cache made under other ones, a
session file records them and a revived run is made under them again, and analyses that read
the model again read it under them."""

from __future__ import annotations

import numpy as np
import pytest

from llm_lens.core.interventions import BlockEdit, Forget, HeadEdit
from llm_lens.core.loop.analyses import compute
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.runs.branching import PathRun, branch, continue_run, extend_prompt
from llm_lens.core.runs.resume import revive
from llm_lens.core.runs.workbench import RunRequest, Workbench
from llm_lens.core.sampling import GREEDY
from llm_lens.core.sessions.format import Session, session_from_run
from llm_lens.core.sessions.read import load_session
from llm_lens.core.sessions.write import save_session

PROMPT = "The river bank was full of fish and the"
CHANGES = (HeadEdit(1, 2, "scale", 0.0), Forget(3), BlockEdit(0, "mlp", 0.5))
MEAN = (HeadEdit(1, 1, "mean"),)


def intervened(engine, n, changes=CHANGES, text=PROMPT):
    run = engine.start(engine.tokenize(text, chat=False), GREEDY, RunConfig(max_new_tokens=n),
                       interventions=changes)  # fmt: skip
    run.run_all()
    return run


def logits(run):
    return np.stack([s.logits for s in run.steps])


@pytest.mark.parametrize("changes", [CHANGES, MEAN], ids=["zero-forget-scale", "head-mean"])
def test_continuation_equals_a_longer_intervened_run(tiny_engine, changes):
    short, longer = intervened(tiny_engine, 3, changes), intervened(tiny_engine, 6, changes)
    child = continue_run(tiny_engine, short, RunConfig(max_new_tokens=3))
    child.run_all()
    assert child.interventions == changes
    assert [s.token.id for s in child.steps] == [s.token.id for s in longer.steps[3:]]
    np.testing.assert_allclose(logits(child), logits(longer)[3:], atol=1e-4)


def test_branch_equals_a_fresh_intervened_run_of_the_same_prefix(tiny_engine):
    run = intervened(tiny_engine, 4)
    forced = int(run.steps[1].top_ids[3])  # another token than the one chosen at step 1
    child = branch(tiny_engine, run, 1, forced, GREEDY, RunConfig(max_new_tokens=3))
    child.run_all()
    prefix = [run.steps[0].token.id, forced]
    prompt = extend_prompt(tiny_engine, run.prompt, prefix)
    fresh = tiny_engine.start(prompt, GREEDY, RunConfig(max_new_tokens=3), interventions=CHANGES)
    fresh.run_all()
    assert child.interventions == CHANGES
    assert [s.token.id for s in child.steps] == [s.token.id for s in fresh.steps]
    np.testing.assert_allclose(logits(child), logits(fresh), atol=1e-4)
    clean = tiny_engine.start(prompt, GREEDY, RunConfig(max_new_tokens=3))
    clean.run_all()
    assert np.abs(logits(clean) - logits(child)).max() > 1e-3  # the change is real
    summary = PathRun.root(child).summary()
    assert [d["kind"] for d in summary.extra["interventions"]] == ["head", "forget", "block"]


def _live(bench, run_id, text, changes=()):
    request = RunRequest(run_id, text, False, GREEDY, RunConfig(max_new_tokens=3),
                         interventions=changes)  # fmt: skip
    items = list(bench.live(request))
    reused = [p[0] for t, p in items if t == "prefix_reused"]
    return [p for t, p in items if t == "step"], reused[0] if reused else 0


def test_prefix_cache_is_keyed_by_the_interventions(tiny_engine):
    bench = Workbench(tiny_engine)
    bench.flags.set_reuse_prefix(True)
    longer = PROMPT + " boat"
    _live(bench, 1, PROMPT)  # clean
    steps, reused = _live(bench, 2, longer, CHANGES)
    assert reused == 0  # the clean cache is not the intervened model's
    fresh = intervened(tiny_engine, 3, text=longer)
    np.testing.assert_allclose(np.stack([s.logits for s in steps]), logits(fresh), atol=1e-4)
    steps, reused = _live(bench, 3, longer + " was", CHANGES)
    assert reused > 0  # the same interventions: the cache is theirs
    fresh = intervened(tiny_engine, 3, text=longer + " was")
    np.testing.assert_allclose(np.stack([s.logits for s in steps]), logits(fresh), atol=1e-4)
    _, reused = _live(bench, 4, longer + " was a", ())
    assert reused == 0  # and back to the clean model: not shared either
    _live(bench, 5, PROMPT, MEAN)
    _, reused = _live(bench, 6, PROMPT + " boat", MEAN)
    assert reused == 0  # a prompt mean belongs to its own prompt


def test_session_round_trip_keeps_them_and_revives_under_them(tiny_engine, tmp_path):
    run = intervened(tiny_engine, 3, CHANGES + MEAN)
    path = tmp_path / "whatif.llmlens"
    save_session(
        path, Session(tiny_engine.info.as_dict(), (session_from_run(run, tiny_engine.info),))
    )
    recorded = load_session(path).runs[0]
    assert recorded.interventions == CHANGES + MEAN
    revived = revive(tiny_engine, recorded)
    assert revived.matches and revived.run.interventions == CHANGES + MEAN
    child = continue_run(tiny_engine, revived.run, RunConfig(max_new_tokens=2))
    child.run_all()
    longer = intervened(tiny_engine, 5, CHANGES + MEAN)
    assert [s.token.id for s in child.steps] == [s.token.id for s in longer.steps[3:]]


def test_a_session_with_a_malformed_intervention_is_one_line(tiny_engine, tmp_path):
    from llm_lens.core.sessions.format import SessionError

    run = intervened(tiny_engine, 2)
    saved = session_from_run(run, tiny_engine.info)
    bad = {"interventions": [{"kind": "head", "layer": 1, "head": 0, "op": "twist"}]}
    path = tmp_path / "bad.llmlens"
    import dataclasses

    save_session(path, Session(tiny_engine.info.as_dict(),
                               (dataclasses.replace(saved, extras_json=bad),)))  # fmt: skip
    with pytest.raises(SessionError, match="malformed interventions"):
        load_session(path)


def test_attention_map_is_computed_under_the_runs_interventions(tiny_engine):
    plain = intervened(tiny_engine, 1, ())
    forgot = intervened(tiny_engine, 1, (Forget(3),))
    args = {"layer": 1, "head": 0}
    clean_map = compute("attention_map", tiny_engine, plain, args).weights
    forgot_map = compute("attention_map", tiny_engine, forgot, args).weights
    assert clean_map[5:, 3].min() > 0
    np.testing.assert_allclose(forgot_map[4:, 3], 0.0, atol=1e-7)  # later queries never see it
    np.testing.assert_allclose(forgot_map[3, 3], clean_map[3, 3], atol=1e-5)  # it sees itself


def test_why_this_token_is_computed_under_the_runs_interventions(tiny_engine):
    run = intervened(tiny_engine, 2, (HeadEdit(1, 2, "scale", 0.0), Forget(3)))
    step = run.steps[1]
    x = compute("explain", tiny_engine, run, {"step": 1})
    assert x.logits.logit == pytest.approx(float(step.logits[step.token.id]), abs=1e-4)
    assert x.logits.heads[1, 2] == 0.0  # the head turned off wrote nothing
