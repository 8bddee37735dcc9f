"""The Embeddings card: where the selected token's input embedding sits in the vocabulary's
2-D PCA."""

from __future__ import annotations

from typing import Any

import numpy as np

from llm_lens.core.cards.common import Explainer, q


def embeddings_card(
    text: str | None,
    token_id: int | None,
    xy: Any,
    norm: float | None,
    explained: Any,
    vocab: int,
) -> Explainer:
    """Where the selected token's input embedding sits in the 2-D PCA of the vocabulary."""
    shows = (
        f"Every dot is one of the {vocab:,} rows of the input embedding matrix, projected to its "
        "two principal components; cyan circles are prompt tokens, orange squares response "
        "tokens, magenta crosses nearest neighbours (cosine similarity)."
    )
    headline = "Select a token to see where its embedding vector sits."
    numbers = []
    if explained is not None:
        ex = np.asarray(explained)
        numbers.append(f"PC1 explains {ex[0]:.1%} and PC2 {ex[1]:.1%} of the variance.")
    if text is not None and xy is not None:
        headline = (
            f"{q(text)} (id {token_id}) sits at PC1 {float(xy[0]):.3f}, PC2 {float(xy[1]):.3f}"
            + (f"; its embedding vector has norm {norm:.3f}." if norm is not None else ".")
        )
    return Explainer(
        headline,
        shows,
        tuple(numbers),
        (),
        "Click a dot for its nearest neighbours; switch to 'layer paths' to follow a token "
        "through the layers.",
    )
