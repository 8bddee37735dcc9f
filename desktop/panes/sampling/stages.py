"""The sampling stages as the Sampling pane plots them: the raw top tokens' probabilities after
each stage, re-staged from a step's logits or read from the loop's own record."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llm_lens.core.records import StepRecord
from llm_lens.core.sampling import SamplingParams, staged

SHOW = 15


@dataclass(frozen=True)
class StageView:
    """One stage as plotted: the raw top-15 tokens' probabilities after this stage."""

    name: str
    probs: np.ndarray  # (SHOW,) float64, same token ids in every stage
    kept: int  # tokens with non-zero probability
    removed_mass: float  # of the previous stage's distribution


def stage_views(
    step: StepRecord, params: SamplingParams, clean_logits: np.ndarray | None = None
) -> list[StageView]:
    """Run the recorded raw logits through the active stages (core.sampling.staged: shared
    with the cards). ``clean_logits`` (What if?): stage the clean run's logits of the same
    context instead, over the same shown tokens (the step's own top ones)."""
    import torch

    from llm_lens.core.sampling import stages_of

    served = step.logits.size == 0  # staged over its alternatives: rows are their places
    ids = torch.arange(min(SHOW, len(step.top_ids))) if served else (
        torch.from_numpy(np.array(step.top_ids[:SHOW])))  # fmt: skip
    if clean_logits is not None and served:
        return []  # a served run has no clean logits to stage
    stages = (
        staged(step, params)
        if clean_logits is None
        else stages_of(clean_logits, step.context_ids, params)
    )
    views = []
    for stage in stages:
        probs = stage.probs[0]  # (vocab,)
        views.append(
            StageView(
                stage.name,
                probs[ids].double().numpy(),
                int((probs > 0).sum()),
                float(stage.removed_mass),
            )
        )
    return views


def recorded_views(step: StepRecord, params: SamplingParams) -> list[StageView] | None:
    """The stages the loop recorded for ``step``, as plotted, when they are those of ``params``.

    The loop staged the step on the model thread already (``StepRecord.stages``: each stage's
    top-n); :func:`~llm_lens.core.arithmetic.recorded_probs` reads each shown token there, or
    says None (a repetition penalty pushed it beyond what was recorded): re-stage the logits.
    """
    from llm_lens.core.arithmetic import recorded_probs

    shown = []  # per shown token, its probability after each stage
    for token in step.top_ids[:SHOW]:
        probs = recorded_probs(step, params, int(token))
        if probs is None:
            return None
        shown.append([p.prob for p in probs])
    table = np.array(shown, np.float64).reshape(len(shown), len(step.stages))
    return [
        StageView(stage.name, table[:, n].copy(), stage.kept, stage.removed_mass)
        for n, stage in enumerate(step.stages)
    ]
