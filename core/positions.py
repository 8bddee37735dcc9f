"""Rotary position embedding (RoPE) as a model with a given head size and base uses it.

Pure numpy, so the Positions pane can draw it before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from llm_lens.core.records import frozen


@dataclass(frozen=True)
class RopeView:
    """Rotary position embedding as this model uses it."""

    inv_freq: np.ndarray  # (head_dim / 2,) radians per position for each dimension pair
    angles: np.ndarray  # (positions, head_dim / 2) radians, mod 2π
    distances: np.ndarray  # (d,)
    score_vs_distance: np.ndarray  # (d,) q·k of a fixed all-ones q and k rotated d apart


@lru_cache(maxsize=8)
def rope_view(head_dim: int, theta: float, positions: int, max_distance: int = 512) -> RopeView:
    """Frequencies, angles and the distance decay of RoPE with this head size and base."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    pos = np.arange(max(positions, 1), dtype=np.float64)
    angles = np.mod(np.outer(pos, inv_freq), 2 * np.pi)
    d = np.arange(max_distance, dtype=np.float64)
    # q·k with q = k = ones, rotated d apart: each pair contributes 2·cos(d·θ_i)
    score = 2 * np.cos(np.outer(d, inv_freq)).sum(axis=1)
    return RopeView(
        frozen(inv_freq, np.float32),
        frozen(angles, np.float32),
        frozen(d, np.float32),
        frozen(score, np.float32),
    )
