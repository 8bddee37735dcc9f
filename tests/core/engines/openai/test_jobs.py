"""Compare and Branch against a real llama.cpp server: parallel requests give each sampler the
tokens it gives alone, and a branch that forces the token the run chose goes on as the run did
(the text so far re-tokenizes to the same tokens here)."""

from __future__ import annotations

import pytest

from llm_lens.core.engines.openai import Endpoint, OpenAIEngine
from llm_lens.core.engines.openai.jobs import continuation, continuation_text, parallel_runs
from llm_lens.core.errors import LensError
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY, SamplingParams

CONFIG = RunConfig(max_new_tokens=6)


@pytest.fixture(scope="module")
def served(llama_server):
    return OpenAIEngine(Endpoint(llama_server), None, top_logprobs=3)


def texts(run) -> list[str]:
    return [s.token.text for s in run.steps]


def test_parallel_runs_equal_the_runs_alone(served):
    prompt = served.tokenize("Once upon a time", chat=False)
    settings = [GREEDY, SamplingParams(temperature=1.0, top_p=0.9, seed=7)]
    together = parallel_runs(served, prompt, settings, CONFIG)
    alone = [served.start(prompt, p, CONFIG) for p in settings]
    for run in alone:
        run.run_all()
    assert [texts(r) for r in together] == [texts(r) for r in alone]
    assert all(r.finish_reason == "length" for r in together)


def test_a_branch_forcing_the_chosen_token_goes_on_as_the_run(served):
    prompt = served.tokenize("The capital of France is", chat=False)
    run = served.start(prompt, GREEDY, RunConfig(max_new_tokens=5))
    run.run_all()
    step = 1
    chosen = run.steps[step].token.text
    assert continuation_text(run, step, chosen) == prompt.text + "".join(texts(run)[: step + 1])
    branch = continuation(run, step, chosen, RunConfig(max_new_tokens=3))
    branch.run_all()
    assert texts(branch) == texts(run)[step + 1 : step + 4]


def test_a_chat_run_is_not_branched(served):
    run = served.start(served.tokenize("Hi"), GREEDY, RunConfig(max_new_tokens=1))
    run.run_all()
    with pytest.raises(LensError, match="run the prompt raw"):
        continuation_text(run, 0, " x")
