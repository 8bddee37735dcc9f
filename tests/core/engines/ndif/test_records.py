"""The payload's size, the logits rebuilt from the tail, the cache by formula."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_lens.core.engines.ndif import records
from llm_lens.core.sessions import compact


def test_payload_bytes_counts_every_tensor():
    payload = {"a": torch.zeros(3), "b": [torch.zeros(2, dtype=torch.int32), (torch.zeros(1),)]}
    assert records.payload_bytes(payload) == 3 * 4 + 2 * 4 + 4
    assert records.payload_bytes({"x": 1.0, "y": "text"}) == 0


def test_rebuilt_logits_equal_the_session_reader_s():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=300).astype(np.float32) * 3
    kept = np.sort(rng.choice(300, 20, replace=False)).astype(np.int64)
    counts, lse = compact.tail_histogram(logits, kept)
    want = compact.rebuild_logits(300, kept, logits[kept], counts, lse)
    np.testing.assert_array_equal(
        records.rebuild_logits(300, kept, logits[kept], counts, lse), want
    )


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
