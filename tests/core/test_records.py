"""The records that leave the worker (``core/records.py``): read-only, frozen, torch-free, and the
run summary.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from llm_lens.core.records import KVCacheStats, PrefillCapture, StageSummary, StepRecord, TokenInfo


def _arrays(obj, path="record"):
    """(path, array) of every numpy array reachable through dataclasses and tuples."""
    if isinstance(obj, np.ndarray):
        yield path, obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _arrays(getattr(obj, f.name), f"{path}.{f.name}")
    elif isinstance(obj, (tuple, list)):
        for i, item in enumerate(obj):
            yield from _arrays(item, f"{path}[{i}]")


def _values(obj):
    yield obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _values(getattr(obj, f.name))
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _values(item)


def test_records_are_read_only_frozen_and_torch_free(greedy_run):
    step, prefill = greedy_run.steps[1], greedy_run.prefill
    arrays = dict(_arrays(step)) | dict(_arrays(prefill, "prefill"))
    for name in ("record.logits", "record.attention", "record.kv.per_layer", "prefill.hidden"):
        assert name in arrays
    assert any(".stages[" in n for n in arrays)
    for name, arr in arrays.items():
        assert not arr.flags.writeable, name
        assert arr.flags.owndata, name  # a copy, never a view of a tensor's memory
        with pytest.raises(ValueError):
            arr.reshape(-1)[0] = 0
    for obj in (step, prefill):
        assert not any(isinstance(v, torch.Tensor) for v in _values(obj))
    frozen_objects = [
        (step, "index"),
        (step.kv, "bytes_total"),
        (step.stages[0], "kept"),
        (step.token, "id"),
        (step.timing, "forward_ms"),
        (prefill, "hidden"),
        (greedy_run.prompt, "text"),
        (greedy_run.summary(), "finish_reason"),
    ]
    for obj, attr in frozen_objects:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, attr, getattr(obj, attr))
    assert isinstance(step, StepRecord) and isinstance(step.kv, KVCacheStats)
    assert isinstance(step.stages[0], StageSummary) and isinstance(step.token, TokenInfo)
    assert isinstance(prefill, PrefillCapture)


def test_run_summary(greedy_run):
    summary = greedy_run.summary()
    steps = greedy_run.steps
    assert summary.run_id == greedy_run.run_id == steps[0].run_id
    assert summary.finish_reason == "length"
    assert summary.generated_ids == tuple(greedy_run.generated_ids)
    assert summary.output_text == greedy_run.output_text() != ""
    assert summary.ttft_ms == steps[0].timing.total_ms > 0
    assert summary.mean_itl_ms == pytest.approx(np.mean([s.timing.total_ms for s in steps[1:]]))
    total_s = sum(s.timing.total_ms for s in steps) / 1e3
    assert summary.tokens_per_s == pytest.approx(len(steps) / total_s)
    assert summary.tokens_per_s > 0


def test_output_text_shows_a_split_character_as_bytes_never_a_replacement(engine):
    """The bundled model writes 🍕 as three byte tokens; cut after the fourth, the summary shows
    the whole first one and the bytes of the second, as the response box does."""
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.records import RunSummary, generated_text
    from llm_lens.core.sampling import GREEDY

    prompt = engine.tokenize("🍕🍕🍕🍕🍕🍕", chat=False)
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=4))
    run.run_all()
    assert [s.token.raw for s in run.steps] == [b"\xf0\x9f", b"\x8d", b"\x95", b"\xf0\x9f"]
    summary = RunSummary.of(run.run_id, prompt, run.steps, run.finish_reason)
    assert summary.output_text == "🍕‹f0 9f›" == generated_text([s.token for s in run.steps])
    partial = RunSummary.of(run.run_id, prompt, run.steps[:2], None)
    assert partial.output_text == "‹f0 9f 8d›" and "\ufffd" not in partial.output_text
