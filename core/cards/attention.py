"""The Attention card: the selected token's row in one head's map, and the patterns the head
shows (found in :mod:`llm_lens.core.arithmetic`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from llm_lens.core.arithmetic import head_pattern, strongest_key
from llm_lens.core.cards.common import Explainer, q


def attention_card(
    layer: int,
    head: int,
    matrix: Any,
    block: int,
    texts: Sequence[str],
    position: int,
) -> Explainer:
    """The selected token's row in one head's map, and the patterns that head shows."""
    w = np.asarray(matrix)
    who = f"head {head}" if head >= 0 else "the mean of its heads"
    shows = (
        f"Layer {layer}, {who}: row = the query token reading, column = the key token "
        "it reads; each row sums to 1 (softmax of q·k / √d). The grid shows every layer × head."
    )
    headline = f"Layer {layer}, {who}: select a token to read its row."
    row = position // max(block, 1)
    if 0 <= position < len(texts) and row < w.shape[0]:
        k, weight = strongest_key(w[row, : row + 1])
        key_pos = k * block
        headline = (
            f"{q(texts[position])} (position {position}) puts its largest weight, "
            f"{weight:.3f}, on {q(texts[key_pos])} (position {key_pos}) in layer {layer}, "
            f"{who}."
        )
    pattern = head_pattern(w) if block == 1 else None
    phenomena = tuple(pattern.names()) if pattern is not None else ()
    numbers: tuple[str, ...] = ()
    if pattern is not None and pattern.rows:
        numbers = (
            f"Mean weight on the first token {pattern.sink:.3f}; on the previous token "
            f"{pattern.previous:.3f} (over {pattern.rows} rows).",
        )
    return Explainer(
        headline, shows, numbers, phenomena, "Click a tile in the grid to compare heads."
    )
