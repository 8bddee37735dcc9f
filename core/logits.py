"""Logits and softmax: the model's raw scores for the next token, and what they mean.

The step loop reads each step's logits once through :func:`read_logits`; everything a pane
shows about a step's distribution (top tokens, the chosen token's probability, rank and the
entropy) is computed here from the model's own float32 logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

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
    p = probs.double()
    logp = torch.where(p > 0, p.log(), torch.zeros_like(p))
    return float(-(p * logp).sum())


def read_logits(logits: Any, token_id: int, top_n: int) -> LogitReading:
    """Softmax, top-n and the chosen token's place in it, from one (vocab,) logit tensor."""
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
