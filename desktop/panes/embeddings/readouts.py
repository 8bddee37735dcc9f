"""What the Embeddings pane says about a point and the selected token: hover lines, the
embedding norm and the card, the marks of the selected token on both plots, and its CSV rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg

from llm_lens.core import cards as ex
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.selection import context_tokens, selected_token

MARK = pg.mkPen("#ff4081", width=3)


def embedding_norm(controller: Controller, token_id: int) -> float | None:
    """‖e‖ of a token's input embedding, read from the run's records where the token occurs."""
    prefill = controller.prefill
    tokens = context_tokens(controller)
    for pos, info in enumerate(tokens):
        if info.id != token_id:
            continue
        if prefill is not None and pos < prefill.hidden.shape[1]:
            return float(np.linalg.norm(prefill.hidden[0, pos]))
        n = len(controller.prompt) if controller.prompt is not None else 0
        step = pos - n + 1  # the step that read the response token at pos
        if 0 < step < len(controller.steps):
            return float(controller.steps[step].residual_norms[0])
    return None


def point_text(controller: Controller, token: int, xy: Any, text: str | None) -> str:
    """A vocabulary point: token, its PCA coordinates, and its embedding norm where known."""
    norm = embedding_norm(controller, token)
    shown = repr(text) if text is not None else "(text unknown: click for neighbours)"
    known = f" · embedding norm ‖e‖ {norm:.3f}" if norm is not None else ""
    return f"token {token} {shown} · PC1 {float(xy[0]):.3f}, PC2 {float(xy[1]):.3f}{known}"


def path_text(
    controller: Controller, coords: Any, pixel: tuple[float, float], x: float, y: float
) -> str:
    """The nearest point of the layer paths ``coords`` (tokens, layers + 1, 2): position,
    token, layer, coordinates, ‖h‖ ('' farther than 8 pixels of ``pixel`` size)."""
    c = np.asarray(coords)
    pw, ph = pixel
    d2 = ((c[..., 0] - x) / (pw or 1)) ** 2 + ((c[..., 1] - y) / (ph or 1)) ** 2
    pos, layer = np.unravel_index(int(np.argmin(d2)), d2.shape)
    if d2[pos, layer] > 64:
        return ""
    tokens, prefill = context_tokens(controller), controller.prefill
    text = repr(tokens[pos].text) if pos < len(tokens) else "?"
    norm = ""
    if prefill is not None and pos < prefill.hidden.shape[1]:
        norm = f" · ‖h‖ {float(np.linalg.norm(prefill.hidden[layer, pos])):.3f}"
    where = "embedding" if layer == 0 else f"after layer {layer}"
    return (
        f"position {pos} {text}, {where} · PC1 {float(c[pos, layer, 0]):.3f}, "
        f"PC2 {float(c[pos, layer, 1]):.3f}{norm}"
    )


class SelectionMarks:
    """The selected token as a ring on the vocabulary map and its path through the layers."""

    def __init__(self, vocab_plot: Any, paths_plot: Any) -> None:
        self.ring = pg.ScatterPlotItem(size=18, pen=MARK, brush=None)
        self.path = pg.PlotDataItem(pen=MARK, symbol="o", symbolSize=5)
        vocab_plot.addItem(self.ring, ignoreBounds=True)
        paths_plot.addItem(self.path, ignoreBounds=True)

    def show(self, projection: Any, paths: Any, chosen: tuple[int, Any] | None) -> dict[str, Any]:
        """Mark the selected (position, token) on both plots; returns the marked coordinates."""
        linked: dict[str, Any] = {}
        if chosen is not None and projection is not None:
            xy = np.asarray(projection.coords[chosen[1].id], np.float64)
            self.ring.setData(pos=xy[None])
            linked["point"] = xy
        else:
            self.ring.setData([], [])
        if chosen is not None and paths is not None and chosen[0] < len(paths.coords):
            coords = np.asarray(paths.coords[chosen[0]], np.float64)  # (layers + 1, 2)
            self.path.setData(coords[:, 0], coords[:, 1])
            linked["path"] = coords
        else:
            self.path.setData([], [])
        return linked


def card_of(controller: Controller, projection: Any) -> ex.Explainer | None:
    """The Embeddings card: the selected token's point, its norm, and the map's variance."""
    if projection is None:
        return None
    chosen = selected_token(controller)
    text = tid = xy = norm = None
    if chosen is not None:
        tid, text = chosen[1].id, chosen[1].text
        xy = projection.coords[tid]
        norm = embedding_norm(controller, tid)
    return ex.embeddings_card(text, tid, xy, norm, projection.explained, len(projection.coords))


def vocab_rows(coords: Any, ids: list[int], texts: dict[int, str]) -> list[tuple[Any, ...]]:
    """CSV rows of the highlighted vocabulary points: id, text, x, y (none before the map)."""
    if coords is None:
        return []
    return [(i, texts.get(i, ""), float(coords[i, 0]), float(coords[i, 1])) for i in ids]


def path_rows(coords: Any, prompt: Any) -> list[tuple[Any, ...]]:
    """CSV rows of the layer paths: position, token, layer, x, y (none before the paths)."""
    if coords is None:
        return []
    c, tokens = coords, prompt.tokens
    return [
        (p, tokens[p].text, layer, float(c[p, layer, 0]), float(c[p, layer, 1]))
        for p in range(c.shape[0])
        for layer in range(c.shape[1])
    ]


def clean_token_note(step: Any, clean: Any, paths: bool) -> tuple[str, int | None]:
    """What if? The mark's line for an intervened run, and the clean run's token id where it
    chose another token at this step (None: none to ring). No intervention changes the input
    embeddings: what moves is the residual stream (the paths) and the tokens chosen."""
    if paths:
        return "the paths are this intervened run's residual stream (embeddings unchanged)", None
    if step is None or clean is None:
        return (
            "the input embeddings are unchanged by any intervention; no clean run read this "
            "context to compare the token chosen",
            None,
        )
    ours, theirs = step.token, clean.token
    if ours.id == theirs.id:
        return f"step {step.index}: the clean run chose the same token, {ours.text!r}", None
    return (
        f"step {step.index}: this run chose {ours.text!r}, the clean run {theirs.text!r} "
        "(dashed ring)",
        int(theirs.id),
    )
