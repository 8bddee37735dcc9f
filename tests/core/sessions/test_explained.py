""" "Why this token?" results kept in a session file."""

from __future__ import annotations

from pathlib import Path

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from llm_lens.core.sessions.format import Session, session_from_run
from llm_lens.core.sessions.read import load_session
from llm_lens.core.sessions.write import save_session
from tests.core.sessions.helpers import assert_same

ROOT = Path(__file__).resolve().parents[3]


def test_explanations_are_kept_and_shown_without_the_model(tmp_path, tiny_engine):
    """ "Why this token?" results computed before saving come back exactly from the file."""
    from llm_lens.core.explain.attribution import explain
    from llm_lens.core.sessions.explained import with_explanations
    from llm_lens.core.sessions.views import RecordedAnalysis

    eng = tiny_engine
    run = eng.start(eng.tokenize("Hello there", chat=False), GREEDY, RunConfig(max_new_tokens=3))
    run.run_all()
    live = {(1, None): explain(eng, run.steps[1]), (2, 7): explain(eng, run.steps[2], 7)}
    saved_run = with_explanations(session_from_run(run, eng.info), live)
    path = tmp_path / "why.llmlens"
    save_session(path, Session(eng.info.as_dict(), (saved_run,)))
    recorded = RecordedAnalysis(load_session(path).runs[0])
    for (step, vs), want in live.items():
        got = recorded.get("explain", {"step": step, "vs": vs})
        assert_same(want, got, f"explain {step} {vs}")  # float32 as computed, exactly
    assert recorded.get("explain", {"step": 0, "vs": None}) is None  # never computed
    # re-saving a reopened run with one more keeps the first ones
    more = with_explanations(recorded.run, {(0, None): explain(eng, run.steps[0])})
    save_session(path, Session(eng.info.as_dict(), (more,)))
    again = RecordedAnalysis(load_session(path).runs[0])
    assert all(
        again.get("explain", {"step": s, "vs": v}) is not None for s, v in [*live, (0, None)]
    )
    assert_same(live[(2, 7)], again.get("explain", {"step": 2, "vs": 7}), "kept")
