"""A served token as the same frozen :class:`~llm_lens.core.records.StepRecord` the local loop
yields: the server's log-probability and alternatives, the stream's timing, and every field the
server cannot fill left empty (zero-size arrays, no KV bytes).

With only the top alternatives, rank, entropy and the raw stage come from those alternatives
alone: the record is marked ``approximate``. ``entropy`` is then a lower bound (the tokens the
server did not list add to it) and ``rank`` is at least the number listed when the chosen
token is not among them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llm_lens.core.engines.base import empty_capture_fields
from llm_lens.core.engines.openai.stream import ServedToken
from llm_lens.core.records import (
    KVCacheStats,
    StageSummary,
    StepRecord,
    StepTiming,
    TokenInfo,
    bytes_text,
    frozen,
)

WHOLE_MASS_TOLERANCE = 1e-3  # how far from 1 the mass of "every token" may be to count exact


@dataclass(frozen=True)
class StepPlace:
    """Where a step sits: its run, index, query position and every token read before it."""

    run_id: int
    index: int
    position: int
    context_ids: tuple[int, ...]


def token_info(token: ServedToken) -> TokenInfo:
    """The token as a record holds it: its bytes' text where the server sent bytes."""
    text = bytes_text(token.raw) if token.bytes_sent else token.text
    return TokenInfo(token.token_id, text, token.raw)


def step_record(
    token: ServedToken, place: StepPlace, gap_ms: float, parse_ms: float, exact: bool = False
) -> StepRecord:
    """The record of one served token. ``gap_ms`` is the wait for its chunk (from the request
    for the first token: the time to first token; 0 for a token that shared a chunk with the
    one before); ``parse_ms`` our own reading of it. ``exact``: the alternatives are the whole
    distribution (a server asked for every token's log-probability), as far as their mass is 1
    within :data:`WHOLE_MASS_TOLERANCE`."""
    alts = token.alternatives
    logprobs = np.array([a.logprob for a in alts], np.float64)  # (N,)
    probs = np.exp(logprobs)  # (N,)
    # "every token" is exact only where the mass is all there: the completions format keys
    # the alternatives by text, so tokens of one text collapse into one (vLLM: 313 of 49152)
    exact = exact and abs(float(probs.sum()) - 1.0) <= WHOLE_MASS_TOLERANCE
    logprob = math.nan if token.logprob is None else token.logprob
    entropy = float(-(probs * logprobs).sum()) if len(alts) else math.nan
    ids = frozen([a.token_id for a in alts], np.int64)
    top_probs = frozen(probs, np.float32)
    raw = StageSummary("raw", 0.0, len(alts), entropy, ids, top_probs)
    return StepRecord(
        run_id=place.run_id,
        index=place.index,
        position=place.position,
        token=token_info(token),
        prob=math.exp(logprob) if token.logprob is not None else math.nan,
        logprob=logprob,
        rank=_rank(token),
        entropy=entropy,
        logits=frozen(np.zeros(0, np.float32)),
        top_ids=ids,
        top_logits=frozen(logprobs, np.float32),  # log-softmax: logits up to a constant
        top_probs=top_probs,
        top_texts=tuple(bytes_text(a.raw) for a in alts),
        stages=(raw,) if alts else (),
        kv=_no_kv(place.position + 1),
        timing=StepTiming(gap_ms, 0.0, parse_ms, waits_measured=False),
        context_ids=frozen(place.context_ids, np.int64),
        approximate=not exact or token.logprob is None,  # a tokens-only step: nothing exact
        **empty_capture_fields(),  # type: ignore[arg-type]
    )


def _rank(token: ServedToken) -> int:
    """The chosen token's place among the alternatives; their count when it is not listed."""
    for n, alt in enumerate(token.alternatives):
        ids = token.token_id >= 0 and alt.token_id >= 0  # else (ids from tokenize) the bytes
        if (alt.token_id == token.token_id) if ids else (alt.raw == token.raw):
            return n
    return len(token.alternatives)


def _no_kv(tokens: int) -> KVCacheStats:
    """A server's KV cache is not visible: the tokens it holds, no bytes."""
    return KVCacheStats(tokens, 0, 0, frozen(np.zeros((0, 2), np.int64)), 0, 0)
