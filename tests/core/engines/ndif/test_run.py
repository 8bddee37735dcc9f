"""An NDIF run: where it stops (a stop string, a cancel before the job) and a sampled run's
records, through nnsight's remote="local" backend."""

from __future__ import annotations

import numpy as np
import pytest

from llm_lens.core.engines.ndif import NdifEngine
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from tests.families import family_model

PROMPT = "Explain transformers like I am 12"


def test_stop_string_ends_the_run(loaded, greedy_run):
    """A stop string cuts the run where the local loop would (the server ran on)."""
    ndif = NdifEngine.local(loaded)
    stop = greedy_run.steps[2].token.text
    got = ndif.start(greedy_run.prompt, GREEDY, RunConfig(max_new_tokens=8, stop_strings=(stop,)))
    got.run_all()
    assert got.finish_reason == "stop"
    assert len(got.steps) <= 3


def test_sampled_run_reads_the_server_s_choices(tokenizer):
    """A sampled run's tokens are the server's generate()'s; each record is consistent with
    the distribution the server read (the token's rank and probability in its own top-N)."""
    from llm_lens.core.sampling import SamplingParams

    ndif = NdifEngine.local(family_model("qwen2", tokenizer))
    params = SamplingParams(temperature=1.5, top_p=1.0, seed=3)
    run = ndif.start(ndif.tokenize(PROMPT), params, RunConfig(max_new_tokens=6))
    steps = run.run_all()
    assert len(steps) == 6 and run.finish_reason in ("length", "eos")
    for step in steps:
        assert step.prob == pytest.approx(np.exp(step.logprob), rel=1e-6)
        where = np.flatnonzero(step.top_ids == step.token.id)
        if where.size:
            assert step.rank == where[0]
            assert step.prob == pytest.approx(float(step.top_probs[where[0]]), rel=1e-6)
        assert [s.name for s in step.stages][:2] == ["raw", "temperature"]


def test_cancel_before_the_job_sends_none(loaded):
    import threading

    cancel = threading.Event()
    cancel.set()
    ndif = NdifEngine.local(loaded)
    seen = []
    run = ndif.start(ndif.tokenize(PROMPT), GREEDY, RunConfig(), cancel, on_status=seen.append)
    assert run.run_all() == [] and run.finish_reason == "cancelled" and not seen
