"""The What-if card: what the shown run changed in the model, and what that did to the selected
step against the clean run that read the same context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from llm_lens.core.cards.common import Explainer, p3, q

SHOWS = (
    "The changes the next run is made under, each with a switch: a head turned off or scaled, a "
    "layer's attention or MLP scaled, an expert forbidden, a token forgotten from the KV cache. "
    "The model's own modules are hooked for that run only; switched off, the run is the clean one."
)
TRY = (
    "Right-click a head in Attention's grid, pick '= 0', press Run with these, then switch it "
    "off and run again: the Logits pane shows both."
)


def whatif_card(changes: Sequence[str], step: Any = None, clean: Any = None) -> Explainer:
    """The card of a run made under ``changes`` (their readings; empty for a clean run), at
    ``step``, beside ``clean`` (the clean run's step of the same context, or None)."""
    if not changes:
        return Explainer("The run shown is clean: nothing in the model was changed.", SHOWS,
                         try_this=TRY)  # fmt: skip
    headline = f"The run shown was made with {len(changes)} change(s): {', '.join(changes)}."
    numbers: list[str] = []
    if step is not None and clean is not None:
        logits = np.asarray(clean.logits, np.float64)
        before = float(np.exp(logits[step.token.id] - np.logaddexp.reduce(logits)))
        numbers.append(
            f"step {step.index}: {q(step.token.text)} with p = {p3(step.prob)}; the clean run "
            f"gave it {p3(before)} and chose {q(clean.token.text)} (p = {p3(clean.prob)})"
        )
    elif step is not None:
        numbers.append("no clean run of this prompt yet: switch the changes off and run it")
    return Explainer(headline, SHOWS, tuple(numbers), try_this=TRY)
