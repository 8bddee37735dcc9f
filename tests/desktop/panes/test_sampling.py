"""desktop.panes.sampling: the pane shows the loop's recorded stages (no work on the GUI thread)
exactly as re-staging the logits would, re-stages when the record cannot tell, and keeps what
it staged until a new run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import SamplingParams
from llm_lens.desktop.panes.sampling import recorded_views, stage_views
from tests.desktop.panes.helpers import show

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


@pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")
def test_sampling_pane_keeps_staged_steps_until_a_new_run(qtbot, ran):
    from llm_lens.desktop.panes.sampling import SamplingPane, stage_views

    pane = show(qtbot, SamplingPane(ran))
    first, second = ran.steps[1], ran.steps[2]
    pane.render(first)
    staged = pane.views
    pane.render(second)
    pane.render(first)  # scrubbing back: the same staging, not recomputed
    assert pane.views is staged
    fresh = stage_views(first, pane.params)
    for mine, ref in zip(pane.views, fresh, strict=True):
        assert mine.name == ref.name and np.array_equal(mine.probs, ref.probs)
    pane.clear()  # a new run: (run id, step) may mean another step now
    pane.render(first)
    assert pane.views is not staged


@pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")
def test_sampling_pane_says_when_a_sessions_compact_logits_are_restaged(qtbot, ran):
    """A step read from a format-3 session keeps its tail as bin levels: re-staged at other
    settings the plots are approximate, and the pane says so; at the run's settings it shows the
    loop's own recorded stages and says nothing of it."""
    import dataclasses

    from llm_lens.desktop.panes.sampling import NOTE, SamplingPane

    pane = show(qtbot, SamplingPane(ran))
    ran.request_params(ran.run_params)  # the shown run's own settings (greedy)
    compact = dataclasses.replace(ran.steps[1], tail_levels=48_800)
    pane.render(compact)
    assert pane.note.text() == NOTE  # the run's own settings: recorded stages, exact
    pane.controls.top_k.setValue(7)  # other settings: re-staged from the compact logits
    pane.render(compact)
    assert "48,800 tail tokens" in pane.note.text() and "approximate" in pane.note.text()
    pane.render(ran.steps[2])  # a live step: every logit is the model's own
    assert pane.note.text() == NOTE
