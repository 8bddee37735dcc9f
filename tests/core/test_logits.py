"""Logits and softmax (``core/logits.py``): one step's reading against a hand computation in
float64 numpy, and the entropy against its definition."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from llm_lens.core.logits import entropy, read_logits, rebuild_logits


def softmax64(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64) - x.max()
    return np.exp(z) / np.exp(z).sum()


def test_read_logits_matches_a_hand_softmax():
    rng = np.random.default_rng(0)
    raw = rng.normal(0, 4, 1000).astype(np.float32)
    chosen = int(np.argsort(raw)[-4])  # the fourth most likely token
    reading = read_logits(torch.from_numpy(raw).half(), chosen, top_n=5)  # half in, float32 out
    logits = raw.astype(np.float16).astype(np.float32)
    probs = softmax64(logits)
    order = np.argsort(-logits, kind="stable")[:5]
    assert reading.logits.dtype == np.float32 and np.array_equal(reading.logits, logits)
    assert reading.top_ids.dtype == np.int64 and reading.top_ids.tolist() == order.tolist()
    np.testing.assert_array_equal(reading.top_logits, logits[order])
    np.testing.assert_allclose(reading.top_probs, probs[order], rtol=1e-5)
    assert reading.rank == 3
    assert reading.prob == pytest.approx(probs[chosen], rel=1e-5)
    assert reading.logprob == pytest.approx(math.log(probs[chosen]), rel=1e-5)
    assert reading.entropy == pytest.approx(float(-(probs * np.log(probs)).sum()), rel=1e-5)
    for array in (reading.logits, reading.top_ids, reading.top_logits, reading.top_probs):
        assert not array.flags.writeable  # what leaves the loop is read-only


def test_rank_counts_only_strictly_higher_logits_and_top_n_is_capped():
    reading = read_logits(torch.tensor([1.0, 3.0, 3.0, 0.0]), token_id=2, top_n=10)
    assert reading.rank == 0  # tied with the top token: only strictly higher logits count
    assert reading.top_ids.shape == (4,) and set(reading.top_ids[:2].tolist()) == {1, 2}
    assert reading.prob == pytest.approx(math.exp(3) / (math.exp(1) + 2 * math.exp(3) + 1))
    assert read_logits(torch.tensor([1.0, 3.0, 3.0, 0.0]), 3, 2).rank == 3


def test_entropy_in_nats_with_zeros_contributing_nothing():
    assert entropy(torch.tensor([0.25, 0.25, 0.25, 0.25])) == pytest.approx(math.log(4))
    assert entropy(torch.tensor([1.0, 0.0, 0.0])) == 0.0
    p = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float16)
    assert entropy(p) == pytest.approx(math.log(2))


def test_rebuild_logits_refuses_ids_it_cannot_place():
    counts, lse = np.array([3], np.int32), np.array([0.0], np.float32)
    back = rebuild_logits(5, np.array([1, 3]), np.array([2.0, 4.0], np.float32), counts, lse)
    assert back.tolist() == pytest.approx([-math.log(3), 2.0, -math.log(3), 4.0, -math.log(3)])
    for kept in ([3, 1], [1, 5]):  # not ascending; past the vocabulary
        with pytest.raises(ValueError, match="kept ids"):
            rebuild_logits(5, np.array(kept), np.zeros(2, np.float32), counts, lse)
