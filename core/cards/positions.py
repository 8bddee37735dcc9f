"""The Positions card: how far RoPE has turned the selected position's dimension pairs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llm_lens.core.cards.common import Explainer, q


def positions_card(
    theta: float | None, inv_freq: Any, position: int, text: str | None
) -> Explainer:
    """How far RoPE has turned the selected position's fastest and slowest dimension pairs."""
    f = np.asarray(inv_freq, np.float64)
    shows = (
        f"RoPE rotates each of the {f.shape[0]} dimension pairs of every query and key by "
        "position × frequency; the left image is that angle (mod 2π) for every prompt "
        "position, so the dot product of a query and a key depends on their distance."
    )
    p = max(position, 0)
    fast, slow = p * f[0], p * f[-1]
    who = f"position {p} ({q(text)})" if text is not None else f"position {p}"
    headline = (
        f"At {who} the fastest pair has turned {fast:.2f} rad ({fast % (2 * math.pi):.2f} "
        f"mod 2π), the slowest {slow:.3g} rad."
    )
    waves = 2 * math.pi / f
    base = f"θ = {theta:g}: " if theta else ""
    numbers = (f"{base}wavelengths run from {waves.min():.3g} to {waves.max():.3g} tokens.",)
    return Explainer(headline, shows, numbers, (), "Select a later token: its row turns further.")
