"""Chunks read as tokens, in both formats, and what the server reported counted."""

from __future__ import annotations

import pytest

from llm_lens.core.engines.openai.client import Event, ServerError
from llm_lens.core.engines.openai.stream import Reported, tokens_of


def read(*chunks: dict) -> tuple[list, Reported]:
    reported = Reported()
    return list(tokens_of([Event(c, float(n)) for n, c in enumerate(chunks)], reported)), reported


def test_completions_logprobs_ranked_by_value():
    chunk = {"choices": [{"index": 0, "text": " Paris.", "logprobs": {
        "tokens": [" Paris", "."], "token_logprobs": [-0.26, -0.38],
        "top_logprobs": [{" the": -2.8, " Paris": -0.26}, {",": -1.6, ".": -0.38}]}}]}  # fmt: skip
    tokens, reported = read(chunk)
    assert [t.text for t in tokens] == [" Paris", "."]
    assert [a.text for a in tokens[0].alternatives] == [" Paris", " the"]
    assert tokens[0].first_in_chunk and not tokens[1].first_in_chunk  # one chunk, two tokens
    assert reported.tokens == 2 and reported.most_alternatives == 2 and not reported.with_bytes


def test_chat_bytes_and_vllm_token_ids():
    """vLLM asked for ids writes "token_id:N" and, as bytes, that text's: the id is kept, the
    bytes are not the token's (its text comes from the server's detokenize endpoint)."""
    vllm = {"token": "token_id:42", "logprob": -1.0, "bytes": list(b"token_id:42"),
            "top_logprobs": [{"token": "token_id:42", "logprob": -1.0}]}  # fmt: skip
    plain = {"token": "\u4f60", "logprob": -0.5, "bytes": [0xE4, 0xBD], "top_logprobs": []}
    chunk = {"choices": [{"index": 0, "logprobs": {"content": [vllm, plain]}}]}
    tokens, reported = read(chunk)
    assert tokens[0].token_id == 42 and tokens[0].raw == b"" and not tokens[0].bytes_sent
    assert tokens[0].alternatives[0].token_id == 42
    assert tokens[1].token_id == -1 and tokens[1].raw == b"\xe4\xbd" and tokens[1].bytes_sent
    said = reported.as_dict()
    assert not said["token_ids"] and not said["token_bytes"] and said["token_ids_from"] == "stream"


def test_llama_server_timings_give_the_cached_tokens():
    _, reported = read({"choices": [], "timings": {"cache_n": 12, "prompt_n": 3}})
    assert reported.cached_tokens == 12 and reported.as_dict()["server_timings"]["prompt_n"] == 3
    _, reported = read({"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": 5}}})
    assert reported.cached_tokens == 5


def test_mismatched_lists_are_one_line():
    bad = {"choices": [{"index": 0, "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0]}}]}
    with pytest.raises(ServerError, match="differ in length"):
        read(bad)
