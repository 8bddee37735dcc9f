"""The Layers card: the residual stream's growth through the layers, and where the logit lens
first agrees with the final token."""

from __future__ import annotations

from typing import Any

import numpy as np

from llm_lens.core.cards.common import Explainer, q
from llm_lens.core.records import StepRecord


def layers_card(step: StepRecord, lens: Any) -> Explainer:
    """Residual growth through the layers and where the logit lens first agrees."""
    norms = step.residual_norms
    biggest = int(np.argmax(step.update_norms))
    shows = (
        "The residual stream at the selected step's query: its norm after each layer, what "
        "attention and the MLP of each layer added, and the logit lens (the final norm and "
        "unembedding applied to every layer's residual)."
    )
    headline = (
        f"Step {step.index}: the residual norm grows from {norms[0]:.2f} (embedding) to "
        f"{norms[-1]:.2f} after layer {len(norms) - 1}; layer {biggest + 1} adds the most."
    )
    numbers = []
    if lens is not None:
        hits = np.flatnonzero(np.asarray(lens.top_ids)[:, 0] == lens.final_id)
        final = q(lens.top_texts[-1][0])
        if hits.size:
            numbers.append(f"The lens' top-1 is already the final {final} at layer {hits[0]}.")
        else:
            numbers.append(f"The lens never predicts the final {final} before the end.")
    return Explainer(
        headline,
        shows,
        tuple(numbers),
        (),
        "Select step 0 and open the Prompt lens tab to see every position's guess.",
    )
