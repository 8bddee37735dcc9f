"""Logits and softmax: the model's raw scores for the next token, and what they mean.

The step loop reads each step's logits once through :func:`read_logits`; everything a pane
shows about a step's distribution (top tokens, the chosen token's probability, rank and the
entropy) is computed here from the model's own float32 logits. :func:`rebuild_logits` expands
kept logits and a tail histogram (a compact session's, an NDIF run's) back to the vocabulary.
torch is imported where it is used: a session file is read without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_lens.core.records import frozen


@dataclass(frozen=True)
class LogitReading:
    """One step's distribution as the loop records it (numpy, read-only)."""

    logits: np.ndarray  # (vocab,) float32, the raw scores
    top_ids: np.ndarray  # (n,) int64, highest logits first
    top_logits: np.ndarray  # (n,) float32
    top_probs: np.ndarray  # (n,) float32, softmax of the full vocabulary
    prob: float  # softmax probability of the chosen token
    logprob: float
    rank: int  # 0 = the most likely token
    entropy: float  # nats, of the full softmax


def entropy(probs: Any) -> float:
    """Shannon entropy in nats of a probability vector (zeros contribute nothing)."""
    import torch

    p = probs.double()
    logp = torch.where(p > 0, p.log(), torch.zeros_like(p))
    return float(-(p * logp).sum())


def read_logits(logits: Any, token_id: int, top_n: int) -> LogitReading:
    """Softmax, top-n and the chosen token's place in it, from one (vocab,) logit tensor."""
    import torch

    logits = logits.float()  # (vocab,)
    logp = torch.log_softmax(logits, dim=-1)  # (vocab,)
    top_l, top_i = torch.topk(logits, min(top_n, logits.shape[0]))  # (n,)
    chosen = float(logits[token_id])
    return LogitReading(
        logits=frozen(logits.cpu().numpy()),
        top_ids=frozen(top_i.cpu().numpy(), np.int64),
        top_logits=frozen(top_l.cpu().numpy()),
        top_probs=frozen(logp[top_i].exp().cpu().numpy()),
        prob=float(logp[token_id].exp()),
        logprob=float(logp[token_id]),
        rank=int((logits > chosen).sum()),
        entropy=entropy(logp.exp()),
    )


def rebuild_logits(
    vocab: int, kept: np.ndarray, values: np.ndarray, counts: np.ndarray, lse: np.ndarray
) -> np.ndarray:
    """(vocab,) float32 logits: ``values`` at ``kept`` (ascending ids), and each other token, in
    id order, at its tail bin's level (the bin's log-sum-exp ``lse`` less the log of its token
    count ``counts``), so the tail's probability mass at temperature 1 is exact. A compact
    session's reader and an NDIF run's records both expand their top-N and histogram so."""
    if kept.size and (kept.min() < 0 or kept.max() >= vocab or np.any(np.diff(kept) <= 0)):
        raise ValueError("logits: kept ids out of range or not ascending")
    if int(counts.sum()) != vocab - kept.size or bool((counts < 0).any()):
        raise ValueError("logits: the tail's counts do not add up to the vocabulary")
    out = np.empty(vocab, np.float32)
    mask = np.ones(vocab, bool)
    mask[kept] = False
    filled = np.nonzero(counts)[0]
    levels = lse[filled].astype(np.float64) - np.log(counts[filled].astype(np.float64))
    out[mask] = np.repeat(levels, counts[filled]).astype(np.float32)
    out[kept] = values
    return out
