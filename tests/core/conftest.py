"""Fixtures shared by the core tests: one greedy run of the bundled model, read by the
fidelity tests of the loop, attention and the layer stack, and that run saved as a session,
read by the session and ``inspect`` tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from llm_lens.core.sessions.format import Session, session_from_run
from llm_lens.core.sessions.views import prompt_attention_maps
from llm_lens.core.sessions.write import save_session
from tests.core.reference import N_GREEDY, PROMPT


@pytest.fixture(scope="session")
def greedy20(engine):
    """A finished greedy chat run of 20 tokens on the article's prompt (read-only)."""
    run = engine.start(engine.tokenize(PROMPT), GREEDY, RunConfig(max_new_tokens=N_GREEDY))
    run.run_all()
    assert len(run.steps) == N_GREEDY and run.finish_reason == "length"
    return run


@pytest.fixture(scope="session")
def greedy_session(greedy_run, engine) -> Session:
    maps = prompt_attention_maps(greedy_run)
    run = session_from_run(greedy_run, engine.info, label="greedy", prompt_attention=maps)
    return Session(model=engine.info.as_dict(), runs=(run,))


@pytest.fixture(scope="session")
def saved(tmp_path_factory, greedy_session) -> Path:
    path = tmp_path_factory.mktemp("session") / "greedy.llmlens"
    assert save_session(path, greedy_session) == path.stat().st_size
    return path
