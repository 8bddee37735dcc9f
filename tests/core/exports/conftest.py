"""A finished greedy run of the tiny random Llama, read by the export tests."""

from __future__ import annotations

from typing import Any

import pytest

from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.conftest import make_tiny


@pytest.fixture(scope="package")
def tiny_run(tokenizer) -> tuple[Any, Any]:
    """(engine, run): four greedy tokens after a raw prompt with HTML in it."""
    engine = Engine(make_tiny(tokenizer))
    prompt = engine.tokenize("<b>Tom</b> & <i>Jerry</i>", chat=False)
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=4))
    run.run_all()
    assert len(run.steps) == 4 and run.finish_reason == "length"
    return engine, run
