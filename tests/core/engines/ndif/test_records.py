"""The payload's size, the logits rebuilt from the tail, the cache by formula."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_lens.core.engines.ndif import records
from llm_lens.core.logits import rebuild_logits
from llm_lens.core.sessions import compact


def test_payload_bytes_counts_every_tensor():
    payload = {"a": torch.zeros(3), "b": [torch.zeros(2, dtype=torch.int32), (torch.zeros(1),)]}
    assert records.payload_bytes(payload) == 3 * 4 + 2 * 4 + 4
    assert records.payload_bytes({"x": 1.0, "y": "text"}) == 0


def test_step_logits_expand_the_top_n_and_tail_as_the_session_reader_does():
    """The top-N and the chosen token exact, the rest from the histogram: one function
    (core/logits.py) for this and the compact session's reader."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=300).astype(np.float32) * 3
    top = np.argsort(-logits)[:20]
    chosen = int(np.argsort(-logits)[40])  # sampled from below the top 20
    kept = np.sort(np.append(top, chosen)).astype(np.int64)
    counts, lse = compact.tail_histogram(logits, kept)
    reading = {
        "top_ids": torch.from_numpy(top), "top_logits": torch.from_numpy(logits[top]),
        "token": chosen, "chosen_logit": float(logits[chosen]),
        "tail_counts": torch.from_numpy(counts), "tail_lse": torch.from_numpy(lse),
    }  # fmt: skip
    got, tail = records.step_logits(reading, 300, None)
    assert tail == 300 - 21
    np.testing.assert_array_equal(got[kept], logits[kept])
    np.testing.assert_array_equal(got, rebuild_logits(300, kept, logits[kept], counts, lse))
    assert records.rebuild_logits is rebuild_logits  # no copy of its own


def test_formula_kv_equals_the_measured_cache(greedy_run, engine):
    for step in greedy_run.steps:
        got = records.formula_kv(engine.info, step.position + 1, 0)
        assert got.bytes_total == step.kv.bytes_total
        np.testing.assert_array_equal(got.per_layer, step.kv.per_layer)


def test_full_activations_grow_with_the_positions(engine):
    info = engine.info
    one = records.full_activation_bytes(info, 1)
    assert one == 4 * ((2 * info.num_layers + 1) * info.hidden_size + info.vocab_size)
    assert records.full_activation_bytes(info, 10) - one == 9 * (one - 4 * info.vocab_size)


def test_step_timing_from_the_server_s_clock():
    """Start, forward and capture done, token handed over (seconds): forward then sampling;
    the job's overhead before the first step in ``between_ms``; no off-CPU waits measured."""
    timing = records.step_timing(torch.tensor([10.0, 10.004, 10.0045], dtype=torch.float64), 120.0)
    assert timing.forward_ms == pytest.approx(4.0) and timing.sample_ms == pytest.approx(0.5)
    assert timing.total_ms == pytest.approx(4.5) and timing.between_ms == 120.0
    assert not timing.waits_measured
