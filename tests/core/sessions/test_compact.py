"""Format 3's compact step arrays: the logit tail histogram and the attention codes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from llm_lens.core.logits import rebuild_logits
from llm_lens.core.sessions.compact import (
    decode_weights,
    encode_weights,
    from_lower_triangle,
    kept_ids,
    lower_triangle,
    tail_histogram,
    weight_error_bound,
)

ROOT = Path(__file__).resolve().parents[3]


def test_tail_histogram_keeps_the_mass_and_each_value_within_its_bin():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, 5000).astype(np.float32)
    logits[7] = 60.0  # far above the rest
    logits[100:140] -= 80  # far below: the last bin
    step = SimpleNamespace(logits=logits, context_ids=np.array([3, 9]), top_ids=np.arange(5),
                           token=SimpleNamespace(id=11))  # fmt: skip
    kept = kept_ids(step)
    assert {3, 9, 11, 7, *range(5)} <= set(kept.tolist()) and len(kept) <= 256 + 8
    counts, lse = tail_histogram(logits, kept)
    back = rebuild_logits(logits.size, kept, logits[kept], counts, lse)
    assert np.array_equal(back[kept], logits[kept])
    tail = np.setdiff1d(np.arange(logits.size), kept)
    lse_true = np.logaddexp.reduce(logits[tail].astype(np.float64))
    assert abs(np.logaddexp.reduce(back[tail].astype(np.float64)) - lse_true) < 1e-4
    # each bin's tokens stay within that bin's range of true values (not the last bin)
    top = logits[tail].max()
    assert back[tail].max() <= top + 1e-5 and back[tail].min() >= logits[tail].min() - 1e-5
    with pytest.raises(ValueError, match="counts"):
        rebuild_logits(logits.size, kept, logits[kept], counts + 1, lse)


def test_attention_codes_stay_within_their_bound():
    w = np.linspace(0, 1, 100001, dtype=np.float32)
    back = decode_weights(encode_weights(w))
    assert np.all(np.abs(back - w) <= weight_error_bound(w) + 1e-7)
    assert np.abs(back - w).max() <= 0.004 and np.abs(back - w)[w <= 0.01].max() <= 4.1e-4
    maps = np.tril(np.random.default_rng(1).random((2, 3, 5, 5), dtype=np.float32))
    assert np.array_equal(from_lower_triangle(lower_triangle(maps), 5), maps)
