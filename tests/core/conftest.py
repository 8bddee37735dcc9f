"""Fixtures shared by the core tests: one greedy run of the bundled model, read by the
fidelity tests of the loop, attention and the layer stack."""

from __future__ import annotations

import pytest

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from tests.core.reference import N_GREEDY, PROMPT


@pytest.fixture(scope="session")
def greedy20(engine):
    """A finished greedy chat run of 20 tokens on the article's prompt (read-only)."""
    run = engine.start(engine.tokenize(PROMPT), GREEDY, RunConfig(max_new_tokens=N_GREEDY))
    run.run_all()
    assert len(run.steps) == N_GREEDY and run.finish_reason == "length"
    return run
