"""The Attention pane's map as an image: the worker's prompt map, pooled, with the row each
decode step's query wrote added beneath it, so step i shows the map as it stood after i new
tokens (an engine without whole maps: those rows alone). Long contexts are max-pooled so the
image never exceeds ~1024 × 1024 cells."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from llm_lens.desktop.widgets.token_text import visible_text

MAX_IMAGE = 1024  # cells per side of the heatmap, at most
BUCKET = 32  # the heatmap's image grows in steps of this many cells (stable shapes)


class MapImage(NamedTuple):
    """The padded image (NaN where nothing was read yet) and what its cells stand for."""

    image: np.ndarray  # (cap, cap): padded to a BUCKET multiple, stable shapes
    size: int  # cells per side the whole run will need
    block: int  # positions per cell (1: unpooled)
    matrix: np.ndarray  # (content, content): the shown map, no padding
    positions: np.ndarray  # first position of each matrix cell
    texts: list[str]  # token text at the first position of each cell
    labels: list[str]  # axis label of each cell (visible whitespace), unthinned


def assemble_map(ctl: Any, amap: Any, step: Any, layer: int, head: int) -> MapImage:
    """Layer ``layer``, head ``head`` at ``step``: the prompt part from ``amap`` (the worker's
    ``attention_map``), each later step's recorded row of the controller's run. ``amap`` None:
    only the rows the engine brought back (NDIF's opened heads: each step's query, the first
    the prompt's last), the prompt's other rows left unread (NaN: transparent)."""
    from llm_lens.core.attention import pool_rows  # imports torch: not at start-up

    n_prompt = len(ctl.prompt)
    total = n_prompt + max(len(ctl.steps), step.index + 1) - 1
    base = int(amap.q_positions[1]) if amap is not None and len(amap.q_positions) > 1 else 1
    factor = max(1, math.ceil(math.ceil(total / base) / MAX_IMAGE))
    block = base * factor
    size = math.ceil(total / block)
    cap = min(math.ceil(size / BUCKET) * BUCKET, max(size, MAX_IMAGE))
    content = math.ceil((n_prompt + step.index) / block)
    image = np.full((cap, cap), np.nan, np.float32)  # not yet read: transparent
    if amap is not None:
        image[:content, :content] = 0.0
        prompt_part = pool_rows(amap.weights, factor)
        image[: prompt_part.shape[0], : prompt_part.shape[1]] = prompt_part
    for record in ctl.steps[0 if amap is None else 1 : step.index + 1]:
        row = record.attention[layer, head]  # (position + 1,)
        pooled = pool_rows(row[None, :], block)[0] if block > 1 else row
        r = record.position // block
        if amap is None and np.isnan(image[r, 0]):
            image[r, :content] = 0.0  # a row brought back: read up to the step shown
        image[r, : pooled.shape[0]] = np.maximum(image[r, : pooled.shape[0]], pooled)
    positions = np.arange(content, dtype=np.int64) * block
    texts = [t.text for t in ctl.prompt.tokens] + [s.token.text for s in ctl.steps]
    where = (lambda p: f"{p} ") if block > 1 else (lambda p: "")  # pooled: block start
    labels = [where(p) + visible_text(texts[p]) for p in positions]
    matrix = image[:content, :content].copy()
    return MapImage(image, size, block, matrix, positions, [texts[p] for p in positions], labels)
