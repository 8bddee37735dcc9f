"""The Sampling pane shows the loop's recorded stages (no work on the GUI thread) exactly as
re-staging the logits would, and re-stages when the record cannot tell."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import SamplingParams
from llm_lens.desktop.panes.sampling import recorded_views, stage_views

PARAMS = SamplingParams(
    temperature=0.8, top_k=10, top_p=0.9, min_p=0.01, repetition_penalty=1.3, seed=3
)


@pytest.fixture(scope="module")
def steps(tiny_engine):
    prompt = tiny_engine.tokenize("the the the cat sat on the mat the", chat=False)
    return tiny_engine.start(prompt, PARAMS, RunConfig(max_new_tokens=5)).run_all()


def test_recorded_stages_equal_restaged_ones(steps):
    used = 0
    for step in steps:
        mine = recorded_views(step, PARAMS)
        ref = stage_views(step, PARAMS)
        if mine is None:  # a shown token the penalty pushed below the recorded top-n
            penalty = step.stages[1]
            lost = set(step.top_ids[:15].tolist()) - set(penalty.top_ids.tolist())
            assert lost and lost <= set(step.context_ids.tolist())
            continue
        used += 1
        assert [v.name for v in mine] == [v.name for v in ref]
        for a, b in zip(mine, ref, strict=True):
            np.testing.assert_allclose(a.probs, b.probs, rtol=1e-6, atol=1e-9)
            assert a.kept == b.kept and a.removed_mass == pytest.approx(b.removed_mass)
        assert any(v.kept < 49152 and (v.probs == 0).any() for v in mine)  # cut tokens: 0
    assert used >= 3


def test_other_settings_or_a_token_beyond_the_record_are_restaged(steps):
    step = steps[1]
    assert recorded_views(step, PARAMS.with_(top_k=0)) is None  # another set of stages
    raw = step.stages[0]
    assert raw.kept > len(raw.top_ids)  # the raw distribution keeps the whole vocabulary
    shown = int(step.top_ids[3])
    keep = raw.top_ids != shown
    cut = dataclasses.replace(raw, top_ids=raw.top_ids[keep], top_probs=raw.top_probs[keep])
    lost = dataclasses.replace(step, stages=(cut, *step.stages[1:]))
    assert recorded_views(lost, PARAMS) is None
