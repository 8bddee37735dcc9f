"""The Experts card: one token's route through the mixture-of-experts layers (or why a dense
model has none)."""

from __future__ import annotations

from typing import Any

import numpy as np

from llm_lens.core.cards.common import Explainer, q

DENSE_TRY = "Load a mixture-of-experts model (Mixtral, Qwen-MoE, OLMoE) to see its routers."


def experts_card(routing: Any, text: str | None, model: str = "This model") -> Explainer:
    """One token's route through the mixture-of-experts layers (``routing``: one row, or None
    for a dense model)."""
    if routing is None:
        return Explainer(
            f"{model} is dense: every token goes through the same MLP in each layer.",
            "A mixture-of-experts model replaces each MLP by many expert MLPs and a router that "
            "sends each token to a few of them; this pane would show which, with their weights.",
            try_this=DENSE_TRY,
        )
    shows = (
        "Left: the router's probability for each expert in each MoE layer, for one token; the "
        "framed cells are the experts it chose, labelled with the weight their outputs were "
        "added with. Right: every token read so far, and the experts it went to."
    )
    first = routing.experts[0, 0]
    names = [str(int(e)) for e in first]
    went = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    who = q(text) if text is not None else f"position {routing.first_position}"
    headline = (
        f"{who} went to experts {went} of {routing.num_experts} in layer "
        f"{int(routing.layers[0])}: only {routing.top_k} of {routing.num_experts} expert MLPs "
        "ran for it there."
    )
    counts = np.bincount(np.asarray(routing.experts[:, 0]).ravel(), minlength=routing.num_experts)
    busiest = int(counts.argmax())
    numbers = (
        f"Across its {len(routing.layers)} MoE layers it used {int((counts > 0).sum())} "
        f"different experts; expert {busiest} was chosen in {int(counts[busiest])} layers.",
        f"The weights come from a {routing.scoring} over the router's scores for each expert.",
    )
    return Explainer(headline, shows, numbers, (), "Click a token on the right to follow it.")
