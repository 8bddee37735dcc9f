"""The Sampling card: which token these settings and this seed would draw, stage by stage."""

from __future__ import annotations

from typing import Any

import numpy as np

from llm_lens.core.arithmetic import draw_at, recorded_draw
from llm_lens.core.cards.common import Explainer, count, pct, q
from llm_lens.core.records import StepRecord
from llm_lens.core.sampling import SamplingParams


def sampling_card(
    step: StepRecord, params: SamplingParams, run_params: bool = False
) -> tuple[Explainer, Any]:
    """Which token these settings and this seed would draw at this step, stage by stage
    (``run_params``: these are the run's own settings, whose stages the loop recorded)."""
    draw = (recorded_draw(step, params) if run_params else None) or draw_at(step, params)
    name = _name_of(step, draw.token_id)
    how = "greedy picks the largest" if draw.greedy else f"seed {draw.seed} draws"
    trail = " → ".join(f"{s.stage} {pct(s.prob)}" for s in draw.stages)
    served = step.logits.size == 0  # staged over the alternatives: a draw is their place
    chosen = step.rank if served else step.token.id
    same = "the token the run chose" if draw.token_id == chosen else "not the run's token"
    which = f"alternative {draw.token_id + 1}" if served else f"id {draw.token_id}"
    headline = f"At step {step.index} {how} {name} ({which}, {same}): {trail}."
    shows = (
        "The selected step's recorded logits run again through each active stage (repetition "
        "penalty, temperature, top-k, top-p, min-p) with the settings above, without the model."
    )
    numbers = tuple(
        f"after {s.stage}: {count(s.kept, 'token')} {'keeps' if s.kept == 1 else 'keep'} "
        "probability"
        for s in draw.stages
    )
    return (
        Explainer(headline, shows, numbers, (), "Move the temperature slider and watch the draw."),
        draw,
    )


def _name_of(step: StepRecord, token_id: int) -> str:
    """The drawn token's text quoted, as the step recorded it; a draw from the tail beyond the
    step's recorded top tokens has no text there, and is said to be one (not '#21661')."""
    if step.logits.size == 0:  # a served step, staged over its alternatives: their place
        known = 0 <= token_id < len(step.top_texts)
        return q(step.top_texts[token_id]) if known else "an alternative not returned"
    if token_id == step.token.id:
        return q(step.token.text)
    hits = np.flatnonzero(np.asarray(step.top_ids) == token_id)
    if hits.size:
        return q(step.top_texts[int(hits[0])])
    return f"a token beyond the top {len(step.top_ids)}"
