"""A streamed reply's chunks read as tokens: /v1/chat/completions (``delta`` and
``logprobs.content``) and /v1/completions (``text`` and ``logprobs.tokens``), as the OpenAI API
writes them and as vLLM, SGLang, llama.cpp, LM Studio and Ollama copy it.

What a server did not send stays absent (``logprob`` None, no alternatives, id -1) and
:class:`Reported` counts what came back, so a trace says which numbers are the server's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from llm_lens.core.engines.openai.client import Event, ServerError

TOKEN_ID_PREFIX = "token_id:"  # vLLM's return_tokens_as_token_ids writes tokens so
# vLLM asked for ``return_token_ids`` adds each chunk's ids (``token_ids``) beside its texts


@dataclass(frozen=True)
class Alternative:
    """One candidate token as the server named it."""

    text: str
    raw: bytes
    logprob: float
    token_id: int = -1


@dataclass(frozen=True)
class ServedToken:
    """One generated token: what the server sent for it and when its chunk arrived."""

    text: str
    raw: bytes
    logprob: float | None
    alternatives: tuple[Alternative, ...]
    arrived: float  # time.perf_counter() seconds
    first_in_chunk: bool = True  # False for the 2nd… token of a chunk that carried several
    token_id: int = -1
    bytes_sent: bool = False  # the server sent the token's bytes (else: its text as UTF-8)


@dataclass
class Reported:
    """Which numbers the server sent, counted over a stream."""

    tokens: int = 0
    with_logprob: int = 0
    with_bytes: int = 0
    with_ids: int = 0  # sent by the server
    ids_tokenized: int = 0  # found through its tokenize endpoint
    ids_missing: str | None = None  # why some tokens kept id -1
    most_alternatives: int = 0
    chunks: int = 0
    model: str | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)  # llama.cpp's llama-server's own

    @property
    def cached_tokens(self) -> int | None:
        """Prompt tokens the server's prefix cache held, where it says: OpenAI's
        ``usage.prompt_tokens_details.cached_tokens`` (vLLM, SGLang), else llama-server's
        ``timings.cache_n``."""
        details = self.usage.get("prompt_tokens_details") or {}
        value = details.get("cached_tokens") if isinstance(details, dict) else None
        if not isinstance(value, int):
            value = self.timings.get("cache_n")
        return int(value) if isinstance(value, int) else None

    def as_dict(self) -> dict[str, Any]:
        n = self.tokens
        return {
            "tokens": n,
            "logprobs": n > 0 and self.with_logprob == n,
            "token_bytes": n > 0 and self.with_bytes == n,
            "token_ids": n > 0 and self.with_ids + self.ids_tokenized == n,
            "token_ids_from": self._ids_from(),
            **({"token_ids_missing": self.ids_missing} if self.ids_missing else {}),
            "alternatives": self.most_alternatives,
            "usage": bool(self.usage),
            "cached_tokens": self.cached_tokens,
            "prompt_tokens": self.usage.get("prompt_tokens"),
            "server_finish_reason": self.finish_reason,
            "server_timings": dict(self.timings),
        }

    def _ids_from(self) -> str | None:
        """Where the ids came from: "stream" (sent by the server), "tokenize" (each token's
        text through its tokenize endpoint), None where no token has one."""
        if self.with_ids:
            return "stream"
        return "tokenize" if self.ids_tokenized else None


def tokens_of(events: Iterable[Event], reported: Reported) -> Iterator[ServedToken]:
    """Every token the events carry, in order; ``reported`` is updated as they pass."""
    for event in events:
        reported.chunks += 1
        data = event.data
        if isinstance(data.get("model"), str):
            reported.model = data["model"]
        if isinstance(data.get("usage"), dict):
            reported.usage = data["usage"]
        if isinstance(data.get("timings"), dict):
            reported.timings = data["timings"]
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            pieces = _with_ids(list(_choice_tokens(choice, event.arrived)), choice)
            for n, token in enumerate(pieces):
                _count(reported, token)
                yield token if n == 0 else _later(token)
            if choice.get("finish_reason"):
                reported.finish_reason = str(choice["finish_reason"])


def _with_ids(pieces: list[ServedToken], choice: dict[str, Any]) -> list[ServedToken]:
    """The chunk's tokens with the ids vLLM sends beside them when asked (``return_token_ids``:
    the choice's ``token_ids``, one per token of the chunk)."""
    from dataclasses import replace

    ids = choice.get("token_ids")
    if not isinstance(ids, list) or len(ids) != len(pieces) or not pieces:
        return pieces
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ServerError(f"the server sent token ids that are not ids: {str(ids)[:80]!r}")
    return [
        p if p.token_id >= 0 else replace(p, token_id=i) for p, i in zip(pieces, ids, strict=True)
    ]


def _later(token: ServedToken) -> ServedToken:
    from dataclasses import replace

    return replace(token, first_in_chunk=False)


def _count(reported: Reported, token: ServedToken) -> None:
    reported.tokens += 1
    reported.with_logprob += token.logprob is not None
    reported.with_bytes += token.bytes_sent
    reported.with_ids += token.token_id >= 0
    reported.most_alternatives = max(reported.most_alternatives, len(token.alternatives))


def _choice_tokens(choice: dict[str, Any], arrived: float) -> Iterator[ServedToken]:
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
        yield from _chat_tokens(logprobs["content"], arrived)
    elif isinstance(logprobs, dict) and isinstance(logprobs.get("tokens"), list):
        yield from _completion_tokens(logprobs, arrived)
    else:  # no logprobs: the text of the chunk, as one token of unknown probability
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(text, str) and text:
            yield ServedToken(text, text.encode("utf-8"), None, (), arrived)


def _chat_tokens(content: list[Any], arrived: float) -> Iterator[ServedToken]:
    for entry in content:
        text, raw, token_id, sent = _named(entry)
        alternatives = []
        for top in entry.get("top_logprobs") or []:
            t_text, t_raw, t_id, _ = _named(top)
            value = _logprob(top)
            if value is not None:
                alternatives.append(Alternative(t_text, t_raw, value, t_id))
        ranked = _ranked(tuple(alternatives))
        yield ServedToken(text, raw, _logprob(entry), ranked, arrived, True, token_id, sent)


def _completion_tokens(logprobs: dict[str, Any], arrived: float) -> Iterator[ServedToken]:
    texts = logprobs["tokens"]
    values = logprobs.get("token_logprobs") or [None] * len(texts)
    tops = logprobs.get("top_logprobs") or [None] * len(texts)
    if len(values) != len(texts) or len(tops) != len(texts):
        raise ServerError("the server sent logprobs whose lists differ in length")
    for text, value, top in zip(texts, values, tops, strict=True):
        text, token_id = _token_id(str(text))
        items = top.items() if isinstance(top, dict) else []
        alternatives = tuple(
            Alternative(t, t.encode("utf-8"), float(v), i)
            for k, v in items
            for t, i in (_token_id(str(k)),)
        )
        value = None if value is None else float(value)
        ranked = _ranked(alternatives)
        yield ServedToken(text, text.encode("utf-8"), value, ranked, arrived, True, token_id)


def _ranked(alternatives: tuple[Alternative, ...]) -> tuple[Alternative, ...]:
    return tuple(sorted(alternatives, key=lambda a: -a.logprob))


def _named(entry: Any) -> tuple[str, bytes, int, bool]:
    """(text, bytes, id, bytes sent?) of a chat logprobs entry: the bytes the server sent
    where it did, else the text's UTF-8."""
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
        raise ServerError(f"the server sent a logprobs entry without a token: {str(entry)[:80]!r}")
    text, token_id = _token_id(entry["token"])
    sent = None if token_id >= 0 else entry.get("bytes")  # vLLM's are those of "token_id:N"
    raw = bytes(sent) if isinstance(sent, list) and all(isinstance(b, int) for b in sent) else None
    return text, raw if raw is not None else text.encode("utf-8"), token_id, raw is not None


def _token_id(text: str) -> tuple[str, int]:
    """vLLM's "token_id:123" is an id, not a text."""
    if text.startswith(TOKEN_ID_PREFIX) and text[len(TOKEN_ID_PREFIX) :].isdigit():
        return "", int(text[len(TOKEN_ID_PREFIX) :])
    return text, -1


def _logprob(entry: dict[str, Any]) -> float | None:
    value = entry.get("logprob")
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ServerError(f"the server sent a logprob that is not a number: {value!r}") from None
