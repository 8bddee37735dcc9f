"""How format 3 stores a step compactly, and how the reader gets the arrays back.

Measured on eight 48-token runs of the bundled model (docs/performance.md), format 2 spent 43 %
of the file on full-vocabulary float16 logits, 31 % on residual-stream vectors and 14 % on
float16 attention rows. Format 3 keeps what the panes show:

- **logits**: the top :data:`LOGIT_KEEP` tokens, every token of the context (the repetition
  penalty reads them) and the chosen one, as float16 (the top 50 stay exact in float32 beside
  them); the rest of the vocabulary, the *tail*, as a histogram of :data:`TAIL_BINS` bins of
  :data:`TAIL_WIDTH` nats below the lowest kept logit: each bin's token count and the
  log-sum-exp of its logits. On reading, the tail's tokens (in id order) get their bins' values
  (each bin's ``lse − log(count)``), so the tail's probability mass at temperature 1 is exact
  and every tail value lies within its bin; *which* tail token had which value is not stored.
- **attention** rows and prompt maps as uint8 codes of ``√w`` (``w = (q / 255)²``): the error
  is at most ``(2√w + 1/510) / 510`` (≤ 0.0040 at w = 1, ≤ 0.0004 at w = 0.01). Prompt maps
  keep only the causal lower triangle.
- **residual stream**: the norms the Layer stack pane draws (residual, attention update, MLP
  update, layer update; float32, exact); the vectors are kept only when asked (autosave, whose
  file has no recorded lens and so recomputes it from them with the model).
"""

from __future__ import annotations

import numpy as np

from llm_lens.core.records import StepRecord, frozen

LOGIT_KEEP = 256  # top tokens whose logits are kept one by one (besides the context's)
TAIL_BINS = 64
TAIL_WIDTH = 0.5  # nats per tail bin; the last bin takes everything lower
CODE_MAX = 255


def kept_ids(step: StepRecord) -> np.ndarray:
    """(K,) int64 ascending: the top :data:`LOGIT_KEEP` ids, the context's and the chosen."""
    logits = np.asarray(step.logits)
    keep = min(LOGIT_KEEP, logits.size)
    top = np.argpartition(-logits, keep - 1)[:keep] if keep else np.zeros(0, np.int64)
    ids = np.concatenate([top, step.context_ids, step.top_ids, [step.token.id]])
    ids = ids[(ids >= 0) & (ids < logits.size)]
    return np.unique(ids.astype(np.int64))


def tail_histogram(logits: np.ndarray, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(counts int32, lse float32), each (TAIL_BINS,): the logits outside ``kept`` by bin."""
    mask = np.ones(logits.size, bool)
    mask[kept] = False
    tail = np.asarray(logits, np.float64)[mask]
    if tail.size == 0:
        return np.zeros(TAIL_BINS, np.int32), np.full(TAIL_BINS, -np.inf, np.float32)
    top = float(tail.max())
    bins = np.minimum(((top - tail) / TAIL_WIDTH).astype(np.int64), TAIL_BINS - 1)
    counts = np.bincount(bins, minlength=TAIL_BINS).astype(np.int32)
    ref = top - TAIL_WIDTH * np.arange(TAIL_BINS, dtype=np.float64)  # each bin's upper edge
    last = bins == TAIL_BINS - 1  # the last bin takes everything lower: its own peak
    ref[-1] = float(tail[last].max()) if last.any() else ref[-1]
    sums = np.bincount(bins, weights=np.exp(tail - ref[bins]), minlength=TAIL_BINS)
    with np.errstate(divide="ignore"):
        lse = np.where(counts > 0, ref + np.log(sums), -np.inf)
    return counts, lse.astype(np.float32)
    top = float(tail.max())
    bins = np.minimum(((top - tail) / TAIL_WIDTH).astype(np.int64), TAIL_BINS - 1)
    np.add.at(counts, bins, 1)
    for b in np.flatnonzero(counts):
        values = tail[bins == b]
        peak = values.max()
        lse[b] = peak + np.log(np.exp(values - peak).sum())
    return counts, lse.astype(np.float32)


def encode_weights(weights: np.ndarray) -> np.ndarray:
    """uint8 codes of attention weights in [0, 1]: ``round(255 √w)``."""
    w = np.clip(np.nan_to_num(np.asarray(weights, np.float32)), 0.0, 1.0)
    codes: np.ndarray = np.rint(np.sqrt(w) * CODE_MAX).astype(np.uint8)
    return codes


def decode_weights(codes: np.ndarray) -> np.ndarray:
    """float32 weights of :func:`encode_weights` codes."""
    root = np.asarray(codes, np.float32) / CODE_MAX
    out: np.ndarray = root * root
    return out


def weight_error_bound(weights: np.ndarray) -> np.ndarray:
    """The largest |decoded − w| the code allows at each weight."""
    bound: np.ndarray = (2 * np.sqrt(np.clip(weights, 0, 1)) + 1 / (2 * CODE_MAX)) / (2 * CODE_MAX)
    return bound


def lower_triangle(maps: np.ndarray) -> np.ndarray:
    """(..., T, T) → (..., T (T + 1) / 2): row q's keys 0…q, rows in order."""
    t = maps.shape[-1]
    rows, cols = np.tril_indices(t)
    out: np.ndarray = maps[..., rows, cols]
    return out


def from_lower_triangle(packed: np.ndarray, t: int) -> np.ndarray:
    """The inverse of :func:`lower_triangle`, zeros above the diagonal."""
    if packed.shape[-1] != t * (t + 1) // 2:
        raise ValueError("prompt attention: the triangle does not match the prompt length")
    out = np.zeros((*packed.shape[:-1], t, t), np.float32)
    rows, cols = np.tril_indices(t)
    out[..., rows, cols] = packed
    return frozen(out)
