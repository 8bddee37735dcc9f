"""The OpenAI engine against a test double of a server: tokens, log-probabilities and
alternatives exactly as sent, the stream's timing, the prefix-cache count, each sampling
setting sent explicitly, and each failure one line that keeps what was already received."""

from __future__ import annotations

import math

import pytest

from llm_lens.core.engines import ModelEngine
from llm_lens.core.engines.openai import Endpoint, OpenAIEngine, ServerError
from llm_lens.core.errors import LensError
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY, SamplingParams

from .fake_server import Fake, serving


def run_on(fake: Fake, timeout: float = 5.0, key: str | None = None, **params):
    with serving(fake) as url:
        engine = OpenAIEngine(Endpoint(url, key, timeout), None)
        prompt = engine.tokenize("Say hello")
        run = engine.start(prompt, params.pop("sampling", GREEDY), RunConfig(max_new_tokens=8))
        run.run_all()
    return engine, run


def test_tokens_logprobs_and_alternatives_are_the_servers():
    engine, run = run_on(Fake())
    assert isinstance(engine, ModelEngine)
    assert engine.identity.model == "fake-model" and engine.identity.url.endswith("/v1")
    first, second = run.steps
    assert [s.token.text for s in run.steps] == ["Hello", " world"]
    assert second.token.raw == b" world"
    assert first.logprob == -0.1 and math.isclose(first.prob, math.exp(-0.1))
    assert second.top_texts == (" world", " there", "!")
    assert list(second.top_logits) == pytest.approx([-0.5, -1.2, -3.0])
    assert second.rank == 0 and second.approximate
    assert second.entropy == pytest.approx(-sum(math.exp(v) * v for v in (-0.5, -1.2, -3.0)))
    assert run.finish_reason == "eos" and second.finish_reason == "eos"
    assert run.reported.cached_tokens == 4
    assert run.reported.as_dict()["logprobs"] and run.reported.as_dict()["token_bytes"]
    assert second.attention.size == 0 and second.hidden.size == 0 and second.kv.bytes_total == 0
    # the prompt's tokens are unknown in chat mode here: the usage's count places the steps
    assert [s.position for s in run.steps] == [6, 7]


def test_every_sampling_setting_is_sent_explicitly():
    fake = Fake()
    params = SamplingParams(temperature=0.8, top_k=0, top_p=0.9, min_p=0.0, seed=3)
    run_on(fake, sampling=params)
    body = fake.bodies[0]
    assert body["stream"] is True and body["logprobs"] is True and body["top_logprobs"] == 20
    assert body["temperature"] == 0.8 and body["top_p"] == 0.9 and body["seed"] == 3
    assert body["repeat_penalty"] == 1.0 and body["repetition_penalty"] == 1.0
    assert body["frequency_penalty"] == 0.0 and body["presence_penalty"] == 0.0
    assert body["top_k"] == 0 and body["min_p"] == 0.0


def test_stream_timing_is_the_chunks_arrival():
    _, run = run_on(Fake("slow"))  # the second chunk waits 2 s
    assert run.finish_reason == "eos"
    assert run.steps[1].timing.forward_ms > 1900 > run.steps[0].timing.forward_ms


@pytest.mark.parametrize(
    ("mode", "line", "received"),
    [
        ("malformed", "malformed chunk", ["Hello"]),
        ("cut", "closed the stream before it finished", ["Hello"]),
        ("nofinish", "ended the stream without a finish reason", ["Hello", " world"]),
    ],
)
def test_a_broken_stream_keeps_what_came(mode, line, received):
    _, run = run_on(Fake(mode))
    assert run.finish_reason == "error" and line in run.stop_error
    assert [s.token.text for s in run.steps] == received
    assert run.steps[-1].finish_reason == "error"


def test_a_timeout_mid_stream_keeps_what_came():
    _, run = run_on(Fake("slow"), timeout=0.5)
    assert run.finish_reason == "error" and "did not answer within 0.5 s" in run.stop_error
    assert len(run.steps) == 1


def test_a_refused_key_is_one_line_without_the_key():
    with pytest.raises(ServerError) as err:
        run_on(Fake(key="right-key"), key="sk-wrong-secret")
    line = str(err.value)
    assert "refused" in line and "401" in line and "sk-wrong-secret" not in line
    assert "\n" not in line


def test_the_key_is_sent_only_in_the_header():
    fake = Fake(key="sk-right")
    engine, run = run_on(fake, key="sk-right")
    assert fake.headers[0]["Authorization"] == "Bearer sk-right"
    assert "sk-right" not in repr(engine.endpoint) and "sk-right" not in str(run.sent)


def test_a_wrong_url_is_one_line():
    with pytest.raises(ServerError, match="cannot reach http://127.0.0.1:9/v1"):
        OpenAIEngine(Endpoint("http://127.0.0.1:9/v1", None, 2.0), None)


def test_an_unserved_model_names_the_served_ones():
    with serving(Fake()) as url, pytest.raises(LensError, match="serves fake-model"):
        OpenAIEngine(Endpoint(url), "other")


def test_credentials_in_the_url_are_not_recorded():
    with serving(Fake()) as url:
        secret = url.replace("http://", "http://user:pw@")
        engine = OpenAIEngine(Endpoint(secret), None)
    assert "pw" not in engine.identity.url and engine.identity.url == url


def test_asking_for_every_token_makes_the_steps_exact():
    fake = Fake()
    with serving(fake) as url:
        engine = OpenAIEngine(Endpoint(url), None, top_logprobs=-1)
        run = engine.start(engine.tokenize("Hi"), GREEDY, RunConfig(max_new_tokens=4))
        run.run_all()
    assert fake.bodies[0]["top_logprobs"] == -1
    assert engine.provides.has("sampling") and not engine.provides.approximate
    # the double sends only 2-3 alternatives: their mass is not 1, so no step claims to be
    # exact (vLLM's whole vocabulary is: test_vllm_server.py)
    assert all(s.approximate and s.top_probs.sum() < 0.99 for s in run.steps)


def test_a_server_without_logprobs_gives_tokens_of_unknown_probability():
    fake = Fake("bare")
    with serving(fake) as url:
        engine = OpenAIEngine(Endpoint(url), None)
        run = engine.start(engine.tokenize("Hi"), GREEDY, RunConfig(max_new_tokens=4))
        run.run_all()
    assert [s.token.text for s in run.steps] == ["Hello", " world"]
    assert all(math.isnan(s.logprob) and len(s.top_ids) == 0 for s in run.steps)
    assert run.reported.as_dict()["logprobs"] is False and run.finish_reason == "eos"
