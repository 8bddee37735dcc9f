"""The Sampling card: which token these settings and this seed would draw, stage by stage."""

from __future__ import annotations

from typing import Any

import numpy as np

from llm_lens.core.arithmetic import draw_at, recorded_draw
from llm_lens.core.cards.common import Explainer, pct, q
from llm_lens.core.records import StepRecord
from llm_lens.core.sampling import SamplingParams


def sampling_card(
    step: StepRecord, params: SamplingParams, run_params: bool = False
) -> tuple[Explainer, Any]:
    """Which token these settings and this seed would draw at this step, stage by stage
    (``run_params``: these are the run's own settings, whose stages the loop recorded)."""
    draw = (recorded_draw(step, params) if run_params else None) or draw_at(step, params)
    text = _text_of(step, draw.token_id)
    how = "greedy picks the largest" if draw.greedy else f"seed {draw.seed} draws"
    trail = " → ".join(f"{s.stage} {pct(s.prob)}" for s in draw.stages)
    same = "the token the run chose" if draw.token_id == step.token.id else "not the run's token"
    headline = f"At step {step.index} {how} {q(text)} (id {draw.token_id}, {same}): {trail}."
    shows = (
        "The selected step's recorded logits run again through each active stage (repetition "
        "penalty, temperature, top-k, top-p, min-p) with the settings above, without the model."
    )
    numbers = tuple(f"after {s.stage}: {s.kept:,} tokens keep probability" for s in draw.stages)
    return (
        Explainer(headline, shows, numbers, (), "Move the temperature slider and watch the draw."),
        draw,
    )


def _text_of(step: StepRecord, token_id: int) -> str:
    if token_id == step.token.id:
        return step.token.text
    hits = np.flatnonzero(np.asarray(step.top_ids) == token_id)
    return step.top_texts[int(hits[0])] if hits.size else f"#{token_id}"
