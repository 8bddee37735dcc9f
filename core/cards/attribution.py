"""The "Why this token?" card: the chosen token's logit as the sum of what wrote it."""

from __future__ import annotations

from typing import Any

import numpy as np

from llm_lens.core.cards.common import Explainer, q


def attribution_card(result: Any) -> Explainer:
    """ "Why this token?": its logit as the sum the view draws (``result`` an ``Explanation``,
    or None before one was asked for)."""
    shows = (
        "The chosen token's logit split into what wrote it: the embedding, each layer's "
        "attention (and each head) and each MLP, through the final norm with its scale held at "
        "this step's value; the chips are coloured by gradient × input; the graph keeps the "
        "routes above the threshold."
    )
    try_this = "Right-click a response token → Why this token?, or pick a rival token in 'vs'."
    if result is None:
        return Explainer("Explain a token: its logit, piece by piece.", shows, (), (), try_this)
    a = result.logits
    if getattr(a, "unsplit", ""):  # a hybrid, latent attention, blocks not added as they are
        headline = f"{q(result.token_text)}: logit {a.logit:.2f}, not split: {a.unsplit}."
        return Explainer(headline, shows, (), (), "Open Input tokens: gradient × input.")
    attn, mlp = float(np.sum(a.heads)), float(np.sum(a.mlp))
    top = np.unravel_index(int(np.argmax(a.heads)), a.heads.shape)
    headline = (
        f"{q(result.token_text)}: logit {a.logit:.2f} = embedding {a.embed:.2f} + attention "
        f"{attn:.2f} + MLPs {mlp:.2f}{_unsplit(a)}."
    )
    numbers = (
        f"The largest head is layer {int(top[0])}, head {int(top[1])} "
        f"({float(a.heads[top]):.2f}); the final norm's divisor is held at {a.norm_scale:.3g}.",
    )
    return Explainer(headline, shows, numbers, (), try_this)


def _unsplit(a: Any) -> str:
    """The terms that do not split over the pieces, those the model has: its biases, its
    final soft-cap; on a model with neither the remainder is float32 rounding, said as such."""
    capped = bool(getattr(a, "has_softcap", False))
    rest = a.residual - a.after_unembed if capped else a.residual
    text = f" + biases {rest:.2g}" if getattr(a, "has_biases", True) else ""
    if capped:
        text += f" + final soft-cap {a.after_unembed:+.2f}"
    if not text:
        text = f" + {rest:.2g} left over" if abs(rest) >= 5e-3 else ""  # else: rounding
    return text
