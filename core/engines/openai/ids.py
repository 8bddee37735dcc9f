"""Token ids for a served run, and where they came from.

A server that sends ids in its stream (vLLM asked for ``return_tokens_as_token_ids``: each
token is written "token_id:N") gives them exactly: their texts then come from its detokenize
endpoint. A server that names tokens by text only (llama.cpp's, llama-cpp-python's, LM Studio,
Ollama) gets each chosen token's text put through its own tokenize endpoint (the one
:mod:`~llm_lens.core.engines.openai.prompt` finds for the prompt): the text becomes the id when
it is one token of that tokenizer, as a token the model chose always is, less any prefix the
endpoint adds to every text (a BOS: what it answers for ""). A token that is part of a
character (its bytes not whole UTF-8) cannot be sent as text and keeps id -1. Each lookup is
one request, made once per distinct text (cached), after the stream has ended: llama-cpp-python
answers its tokenize endpoint only between generations (a lookup during the stream waited for
the whole generation here), so the live records carry -1 and the run's own steps (what a trace
or a session keeps) get the ids when it finishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from llm_lens.core.engines.openai.client import Endpoint, ServerError
from llm_lens.core.engines.openai.prompt import DIALECTS, Ids, detokenize
from llm_lens.core.engines.openai.stream import Alternative, ServedToken
from llm_lens.core.records import StepRecord, frozen

NO_ENDPOINT = "this server sends tokens as text and has no tokenize endpoint: ids are -1"
PART_OF_CHARACTER = "a token that is part of a character cannot be tokenized as text: id -1"
NOT_ONE_TOKEN = "the server's tokenizer did not read a token's text back as one token: id -1"
FAILED = "the server's tokenize endpoint stopped answering: the tokens after are id -1"


class TokenIds:
    """Names the tokens of one server: ids for texts, texts for ids, each asked once."""

    def __init__(self, endpoint: Endpoint, model: str) -> None:
        self.endpoint, self.model = endpoint, model
        self._dialect: tuple[str, Ids, list[int]] | None = None
        self._probed = False
        self._failed = False
        self._ids: dict[str, int] = {}
        self._texts: dict[int, str] = {}

    @property
    def dialect(self) -> str | None:
        """The tokenize endpoint this server answers on ("llama-cpp-python", "vllm",
        "llama.cpp"), None where it has none (asked once)."""
        found = self._found()
        return None if found is None else found[0]

    def _found(self) -> tuple[str, Ids, list[int]] | None:
        if not self._probed:
            self._probed = True
            for name, attempt in DIALECTS:
                try:
                    prefix = attempt(self.endpoint, self.model, "")
                except ServerError:
                    continue
                if prefix is not None:
                    self._dialect = (name, attempt, prefix)
                    break
        return self._dialect

    def id_of(self, text: str) -> int:
        """The id of a one-token text; -1 where the server cannot say or it is not one."""
        found = self._found()
        if found is None or not text:
            return -1
        if text not in self._ids:
            _name, attempt, prefix = found
            ids: list[int] = []
            if not self._failed:  # one failure (a timeout) is not waited for again per text
                try:
                    ids = attempt(self.endpoint, self.model, text) or []
                except ServerError:
                    self._failed = True
            ids = ids[len(prefix) :] if ids[: len(prefix)] == prefix else ids
            self._ids[text] = ids[0] if len(ids) == 1 else -1
        return self._ids[text]

    def text_of(self, token_id: int) -> str:
        """The text of an id, from the server's detokenize endpoint ("" where it has none)."""
        if token_id not in self._texts:
            kind = self.dialect or "vllm"
            self._texts[token_id] = detokenize(self.endpoint, self.model, token_id, kind)
        return self._texts[token_id]

    def with_texts(self, token: ServedToken) -> ServedToken:
        """A token of an id-only stream (vLLM's "token_id:N") and its alternatives with their
        texts (asked live: vLLM answers detokenize beside a running stream)."""
        if token.token_id < 0:
            return token
        alternatives = tuple(self._alternative(a) for a in token.alternatives)
        if token.text:
            return replace(token, alternatives=alternatives)
        text = self.text_of(token.token_id)
        return replace(token, text=text, raw=text.encode("utf-8"), alternatives=alternatives)

    def named_steps(
        self, steps: Sequence[StepRecord], prompt_ids: Sequence[int]
    ) -> tuple[list[StepRecord], int, str | None]:
        """``steps`` with each text-only token's id (its text through the tokenize endpoint,
        once per distinct text) and context ids to match; how many got one; why any kept -1.
        Asked after the stream: llama-cpp-python answers tokenize only between generations."""
        out: list[StepRecord] = []
        named, missing = 0, None
        context = list(prompt_ids)
        for step in steps:
            token = step.token
            if token.id < 0:
                whole = token.text != "" and token.raw == token.text.encode("utf-8")  # not a part
                found = self.id_of(token.text) if whole else -1
                if found >= 0:
                    token, named = replace(token, id=found), named + 1
                else:
                    missing = missing or self.missing_line(whole)
            out.append(replace(step, token=token, context_ids=frozen(context, np.int64)))
            context.append(token.id)
        return out, named, missing

    def _alternative(self, alt: Alternative) -> Alternative:
        if alt.text or alt.token_id < 0:
            return alt
        text = self.text_of(alt.token_id)
        return replace(alt, text=text, raw=text.encode("utf-8"))

    def missing_line(self, whole: bool = True) -> str:
        """Why a token kept id -1."""
        if self.dialect is None:
            return NO_ENDPOINT
        if self._failed:
            return FAILED
        return PART_OF_CHARACTER if not whole else NOT_ONE_TOKEN
