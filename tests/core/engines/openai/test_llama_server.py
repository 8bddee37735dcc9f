"""The OpenAI engine against a real llama.cpp server on the bundled model: every token and
log-probability is the server's own (a non-streamed reply to the same request), the prompt's
tokens are its tokenizer's and ours, greedy chat tokens equal the local engine's, and no key
reaches a trace or the terminal."""

from __future__ import annotations

import json

import pytest

from llm_lens.core.engines.openai import Endpoint, OpenAIEngine
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY, SamplingParams

TOKENS = 8
# llama.cpp multiplies by the Q4_1 blocks with activations rounded to 8 bits; transformers
# multiplies by the dequantized weights in float32: log-probabilities differ by up to ~0.15
# (measured over the 12 greedy chat tokens of the article's prompt)
LOGPROB_TOLERANCE = 0.25


@pytest.fixture(scope="module")
def served(llama_server):
    return OpenAIEngine(Endpoint(llama_server), None, top_logprobs=5)


def non_streamed(served, run) -> dict:
    body = run.sent | {"stream": False}
    body.pop("stream_options")
    path = "chat/completions" if run.prompt.chat else "completions"
    return served.endpoint.post_json(path, body)["choices"][0]


@pytest.mark.parametrize("chat", [True, False])
def test_tokens_and_logprobs_are_the_servers(served, chat):
    params = SamplingParams(temperature=0.9, top_p=0.9, seed=5)
    prompt = served.tokenize("The capital of France is", chat=chat)
    run = served.start(prompt, params, RunConfig(max_new_tokens=TOKENS))
    run.run_all()
    assert run.finish_reason in ("length", "eos") and run.stop_error is None
    reply = non_streamed(served, run)
    if chat:
        entries = reply["logprobs"]["content"]
        texts, values = [e["token"] for e in entries], [e["logprob"] for e in entries]
        tops = [[t["token"] for t in e["top_logprobs"]] for e in entries]
    else:
        texts, values = reply["logprobs"]["tokens"], reply["logprobs"]["token_logprobs"]
        tops = [sorted(d, key=d.get, reverse=True) for d in reply["logprobs"]["top_logprobs"]]
    assert [s.token.text for s in run.steps] == texts
    assert [s.logprob for s in run.steps] == pytest.approx(values, abs=1e-4)
    assert [list(s.top_texts) for s in run.steps] == tops
    # llama.cpp adds the chosen token to the top 5 when it is not among them
    assert all(s.approximate and len(s.top_ids) in (5, 6) for s in run.steps)
    assert run.engine_record()["request"]["repeat_penalty"] == 1.0


def test_raw_prompt_tokens_are_the_servers_and_ours(served, engine):
    text = "The capital of France is"
    prompt = served.tokenize(text, chat=False)
    said = served.endpoint.post_json("//extras/tokenize", {"input": text})["tokens"]
    assert prompt.ids == said == engine.tokenize(text, chat=False).ids
    assert "".join(t.text for t in prompt.tokens) == text


def test_greedy_chat_tokens_equal_the_local_engines(served, greedy_run):
    prompt = served.tokenize(greedy_run.prompt.text, chat=True)
    run = served.start(prompt, GREEDY, RunConfig(max_new_tokens=len(greedy_run.steps)))
    run.run_all()
    assert [s.token.text for s in run.steps] == [s.token.text for s in greedy_run.steps]
    assert [s.token.id for s in run.steps] == [s.token.id for s in greedy_run.steps]
    local = [s.logprob for s in greedy_run.steps]
    assert [s.logprob for s in run.steps] == pytest.approx(local, abs=LOGPROB_TOLERANCE)


def test_trace_cli_records_the_engine_and_never_the_key(
    llama_server, tmp_path, monkeypatch, capsys
):
    from llm_lens.core.cli.trace import main

    secret = "sk-test-3f9a1c-do-not-write"
    monkeypatch.setenv("LENS_TEST_KEY", secret)
    monkeypatch.setenv("LLM_LENS_LOG_DIR", str(tmp_path / "logs"))
    out = tmp_path / "trace.json"
    base = llama_server.replace("http://", "http://someone:hunter2@")
    argv = ["Hi", "--engine", "openai", "--base-url", base, "--api-key-env", "LENS_TEST_KEY",
            "--greedy", "--max-new-tokens", "3", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    text = out.read_text()
    err = capsys.readouterr().err
    for leak in (secret, "hunter2", "someone"):
        assert leak not in text and leak not in err
    assert not (tmp_path / "logs").exists() or not any(
        secret in p.read_text() for p in (tmp_path / "logs").iterdir()
    )
    trace = json.loads(text)
    assert trace["engine"]["name"] == "openai" and trace["engine"]["url"] == llama_server
    assert trace["engine"]["model"].endswith(".gguf")
    assert len(trace["steps"]) == 3 and trace["finish_reason"] == "length"


def test_a_tokens_only_run_is_the_servers_and_saves(llama_server, tmp_path, capsys):
    """Asked for no log-probabilities, llama.cpp sends none: the run keeps the server's tokens
    and the stream's timing, says what it lacks, and saves, reopens and inspects."""
    import math

    from llm_lens.core.cli.inspect import main as inspect
    from llm_lens.core.cli.served import write_served_session
    from llm_lens.core.engines.openai.engine import NO_LOGPROBS
    from llm_lens.core.exports.trace import json_text, run_dict
    from llm_lens.core.sessions.read import load_session

    engine = OpenAIEngine(Endpoint(llama_server), None, logprobs=False)
    prompt = engine.tokenize("The capital of France is", chat=False)
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=TOKENS))
    run.run_all()
    assert "logprobs" not in run.sent and run.finish_reason == "length"
    reply = non_streamed(engine, run)
    assert reply["logprobs"] is None and run.output_text() == reply["text"]
    assert len(run.steps) == TOKENS and all(s.timing.total_ms > 0 for s in run.steps[1:])
    assert all(math.isnan(s.prob) and s.approximate and not len(s.top_ids) for s in run.steps)
    assert engine.tokens_only and engine.provides.why_not("logprobs") == NO_LOGPROBS
    assert engine.provides.has("tokens") and engine.provides.has("timing")
    trace = json.loads(json_text(run_dict(engine, run)))
    assert trace["steps"][0]["prob"] is None and trace["engine"]["reported"]["logprobs"] is False
    assert trace["engine"]["provides"]["missing"]["alternatives"] == NO_LOGPROBS
    path = tmp_path / "tokens-only.llmlens"
    assert write_served_session(run, engine, str(path)) > 0
    (back,) = load_session(path).runs
    assert [s.token.text for s in back.steps] == [s.token.text for s in run.steps]
    assert all(math.isnan(s.logprob) and math.isnan(s.entropy) for s in back.steps)
    capsys.readouterr()
    assert inspect([str(path)]) == 0
    assert reply["text"].split()[0] in capsys.readouterr().out


def test_token_ids_are_the_gguf_tokenizers(served, engine):
    """llama.cpp sends texts only: each is put through its tokenize endpoint after the stream,
    and the ids are the ones the bundled GGUF's tokenizer (transformers', here) has for them."""
    prompt = served.tokenize("The capital of France is", chat=False)
    run = served.start(prompt, GREEDY, RunConfig(max_new_tokens=TOKENS))
    run.run_all()
    reported = run.engine_record()["reported"]
    assert reported["token_ids"] and reported["token_ids_from"] == "tokenize"
    assert "token_ids_missing" not in reported and served.provides.has("token_ids")
    ids = [s.token.id for s in run.steps]
    assert [engine.tokenizer.decode([i]) for i in ids] == [s.token.text for s in run.steps]
    assert [engine.tokenizer.convert_ids_to_tokens(i) for i in ids] == [
        engine.tokenizer.tokenize(s.token.text)[0] for s in run.steps
    ]
    last = run.steps[-1]
    assert list(last.context_ids) == [*prompt.ids, *ids[:-1]]


def test_a_cancel_is_noticed_without_waiting_for_a_chunk(served):
    """Another request holds the server (it serves one at a time): no chunk comes, and the
    cancel still ends the run within a fraction of a second."""
    import threading
    import time

    from llm_lens.core.engines.openai.reader import POLL_S

    never_ends = {str(i): -100.0 for i in (0, 1, 2)}  # SmolLM2's end-of-text tokens
    body = {"prompt": "Once upon a time", "max_tokens": 150, "temperature": 0.0,
            "stream": False, "logit_bias": never_ends}  # fmt: skip
    prompt = served.tokenize("Hi", chat=False)  # before: tokenize too waits for the server
    holder = threading.Thread(target=served.endpoint.post_json, args=("completions", body))
    holder.start()
    time.sleep(0.3)  # the holder's request is in
    cancel = threading.Event()
    run = served.start(prompt, GREEDY, RunConfig(64), cancel)
    threading.Timer(0.5, cancel.set).start()
    started = time.perf_counter()
    run.run_all()
    waited = time.perf_counter() - started
    held = holder.is_alive()  # the server was still busy with the other request
    holder.join()
    assert held and run.finish_reason == "cancelled" and not run.steps
    assert waited < 0.5 + 4 * POLL_S + 0.3  # the timer, the poll, a loaded machine's slack


def test_ctrl_c_keeps_the_tokens_received(served):
    """The first Ctrl+C of ``trace --engine openai`` ends the stream; the run keeps its tokens
    and the trace says so (exit 130)."""
    import os
    import signal

    from llm_lens.core.cli.served import keep_on_ctrl_c, stopped_early
    from llm_lens.core.exports.trace import run_dict

    def work(cancel):
        run = served.start(served.tokenize("Tell me a story", chat=False), GREEDY,
                           RunConfig(max_new_tokens=200), cancel)  # fmt: skip
        for step in run:
            if step.index == 1:
                os.kill(os.getpid(), signal.SIGINT)  # its handler sets the cancel
        return run

    run, cancel = keep_on_ctrl_c(work)
    assert cancel.is_set() and run.finish_reason == "cancelled" and len(run.steps) == 2
    assert stopped_early(run_dict(served, run)) == 130
