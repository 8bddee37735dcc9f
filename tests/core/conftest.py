"""Fixtures shared by the core tests: one greedy run of the bundled model, read by the
fidelity tests of the loop, attention and the layer stack, and that run saved as a session,
read by the session and ``inspect`` tests; a tiny random Llama saved as a model folder, for the
tests of what the CLI writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from llm_lens.core.sessions.format import Session, session_from_run
from llm_lens.core.sessions.views import prompt_attention_maps
from llm_lens.core.sessions.write import save_session
from tests.conftest import make_tiny
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


@pytest.fixture(scope="module")
def tiny_folder(tokenizer, tmp_path_factory):
    """A tiny random Llama saved as a model folder the CLI can load (one per test module; a
    module that needs another kind of folder defines its own ``tiny_folder``)."""
    folder = tmp_path_factory.mktemp("tiny-model")
    loaded = make_tiny(tokenizer)
    loaded.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
