"""What is known of a served model and of a prompt's tokens: as much as the server says.

The OpenAI API has no tokenize endpoint; servers add their own. ``tokenize_served`` tries
llama-cpp-python's ``/extras/tokenize``, vLLM's and SGLang's ``/tokenize`` and llama.cpp's
``/tokenize`` in turn, then names each token through the matching detokenize endpoint. In
chat mode the server applies its own template: the tokens are known only where a server
tokenizes messages (vLLM) — elsewhere the prompt has no tokens and the usage the stream
reports gives its length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llm_lens.core.engines.openai.client import Endpoint, ServerError
from llm_lens.core.records import ModelInfo, PromptTokens, TokenInfo

MAX_NAMED = 512  # prompt tokens named one request each; longer prompts keep their ids only
Ids = Callable[[Endpoint, str, str], list[int] | None]


def served_info(model: str, url: str, listed: list[dict[str, Any]]) -> ModelInfo:
    """A :class:`ModelInfo` with what a server lists (vLLM's ``max_model_len``, llama.cpp's
    ``meta.n_ctx_train``); shapes it does not report are 0."""
    entry = next((m for m in listed if m.get("id") == model), {})
    found = entry.get("meta")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    context = entry.get("max_model_len") or meta.get("n_ctx_train") or 0
    vocab = meta.get("n_vocab") or 0
    return ModelInfo(
        name=model, source=url, architecture="served", num_layers=0, num_heads=0,
        num_kv_heads=0, head_dim=0, hidden_size=0, vocab_size=int(vocab),
        context_length=int(context), dtype="", device="server",
        num_parameters=int(meta.get("n_params") or 0), position_kind="none", rope_theta=None,
        weights_id="", attention_note="this server reports no attention",
    )  # fmt: skip


def tokenize_served(
    endpoint: Endpoint, model: str, text: str, chat: bool, parse_special: bool = False
) -> PromptTokens:
    """The prompt's tokens as the server counts them (none when it cannot say)."""
    dialects = (("vllm", _vllm_messages),) if chat else DIALECTS
    ids, kind = None, ""
    for name, attempt in dialects:
        ids = _first(endpoint, model, text, (attempt,))
        if ids is not None:
            kind = name
            break
    tokens = () if ids is None else _named(endpoint, model, ids, kind)
    return PromptTokens(text, "" if chat else text, chat, tokens, parse_special)


def _first(endpoint: Endpoint, model: str, text: str, tries: tuple[Ids, ...]) -> list[int] | None:
    for attempt in tries:
        try:
            ids = attempt(endpoint, model, text)
        except ServerError:
            continue
        if ids is not None:
            return ids
    return None


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(i, int) for i in value):
        return list(value)
    if isinstance(value, list) and all(isinstance(i, dict) and "id" in i for i in value):
        return [int(i["id"]) for i in value]
    return None


def _extras(endpoint: Endpoint, model: str, text: str) -> list[int] | None:
    reply = endpoint.post_json("//extras/tokenize", {"input": text, "model": model})
    return _ints(reply.get("tokens")) if isinstance(reply, dict) else None


def _vllm(endpoint: Endpoint, model: str, text: str) -> list[int] | None:
    reply = endpoint.post_json("//tokenize", {"model": model, "prompt": text})
    return _ints(reply.get("tokens")) if isinstance(reply, dict) else None


def _vllm_messages(endpoint: Endpoint, model: str, text: str) -> list[int] | None:
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    reply = endpoint.post_json("//tokenize", body)
    return _ints(reply.get("tokens")) if isinstance(reply, dict) else None


def _cpp(endpoint: Endpoint, model: str, text: str) -> list[int] | None:
    reply = endpoint.post_json("//tokenize", {"content": text})
    return _ints(reply.get("tokens")) if isinstance(reply, dict) else None


DIALECTS: tuple[tuple[str, Ids], ...] = (
    ("llama-cpp-python", _extras),
    ("vllm", _vllm),
    ("llama.cpp", _cpp),
)


def _named(endpoint: Endpoint, model: str, ids: list[int], kind: str) -> tuple[TokenInfo, ...]:
    """Each id with its text from the server's detokenize endpoint (empty where it has none or
    the prompt is longer than :data:`MAX_NAMED`)."""
    texts = [detokenize(endpoint, model, i, kind) if len(ids) <= MAX_NAMED else "" for i in ids]
    return tuple(TokenInfo(i, t, t.encode("utf-8")) for i, t in zip(ids, texts, strict=True))


def detokenize(endpoint: Endpoint, model: str, token: int, kind: str) -> str:
    """One id's text through the detokenize endpoint of the dialect ``kind`` ("" where the
    server has none)."""
    try:
        if kind == "llama-cpp-python":
            reply = endpoint.post_json("//extras/detokenize", {"tokens": [token], "model": model})
            return str(reply.get("text", ""))
        if kind == "vllm":
            reply = endpoint.post_json("//detokenize", {"model": model, "tokens": [token]})
            return str(reply.get("prompt", ""))
        reply = endpoint.post_json("//detokenize", {"tokens": [token]})
        return str(reply.get("content", ""))
    except (ServerError, AttributeError):
        return ""
