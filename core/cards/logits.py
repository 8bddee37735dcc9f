"""The Logits card: from the chosen token's logit to its probability, and what the sampling
settings make of it."""

from __future__ import annotations

import numpy as np

from llm_lens.core.arithmetic import StageProb, recorded_probs, softmax_steps
from llm_lens.core.cards.common import Explainer, pct, q
from llm_lens.core.records import StepRecord
from llm_lens.core.sampling import SamplingParams, staged


def logits_card(step: StepRecord, params: SamplingParams, run_params: bool = False) -> Explainer:
    """From the chosen token's logit to its probability, and what the settings make of it
    (``run_params``: these are the run's own settings, whose stages the loop recorded)."""
    sm = softmax_steps(step, 5)
    tid = step.token.id
    z = float(np.asarray(step.logits)[tid])
    shows = (
        f"The raw scores (logits) the model gave the top tokens of its {sm.vocab:,}-entry "
        "vocabulary, and their softmax: p = exp(z − max) / Σ exp(z − max)."
    )
    parts = [f"{q(step.token.text)} had logit {z:.1f}; softmax turns it into {pct(step.prob)}"]
    probs = recorded_probs(step, params, tid) if run_params else None
    if probs is None:
        probs = [
            StageProb(s.name, float(s.probs[0, tid]), int((s.probs[0] > 0).sum()))
            for s in staged(step, params)
        ]
    for s in probs[1:]:
        if s.stage == "temperature":
            parts.append(f"at temperature {params.temperature:g} it becomes {pct(s.prob)}")
        elif s.stage in ("top_p", "top_k", "min_p"):
            kept = s.kept
            value = {"top_p": params.top_p, "top_k": params.top_k, "min_p": params.min_p}
            name = s.stage.replace("_", "-")
            parts.append(f"{name} {value[s.stage]:g} keeps {kept:,} token{'s' * (kept != 1)}")
    numbers = tuple(
        f"{q(r.text)}: z = {r.logit:.2f}; z − max = {r.shifted:.2f}; exp = {r.exp:.4g}; "
        f"÷ {sm.total:.4g} = {pct(r.prob)}"
        for r in sm.rows
    )
    return Explainer(
        "; ".join(parts) + ".",
        shows,
        numbers,
        (),
        "Tick 'logits' to see the raw scores the softmax starts from.",
    )
