"""Hover readouts: the numbers under the mouse on every heatmap, bar and point.

Each ``*_text`` function is pure (pane state and view coordinates in, one line out, '' outside
the data), so tests call it directly; :func:`install_hover` shows the line in a label under the
pane while the mouse moves over its plots.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PySide6.QtWidgets import QLabel

from llm_lens.desktop.state.selection import context_tokens

TILE = 32


def _q(text: str) -> str:
    return repr(text)


def attention_cell_text(pane: Any, x: float, y: float) -> str:
    """'query 12 'bank' → key 3 'the': weight 0.412 · layer 3, head 5'."""
    qc, kc = int(math.floor(y)), int(math.floor(x))
    n = pane.matrix.shape[0]
    if not (0 <= qc < n and 0 <= kc < n):
        return ""
    value = float(pane.matrix[qc, kc])
    weight = "not read (future token)" if kc > qc or math.isnan(value) else f"weight {value:.4f}"
    pooled = f" (max over blocks of {pane.block})" if pane.block > 1 else ""
    return (
        f"query {int(pane.positions[qc])} {_q(pane.texts[qc])} → key {int(pane.positions[kc])} "
        f"{_q(pane.texts[kc])}: {weight}{pooled} · layer {pane.layer_box.value()}, "
        f"head {pane.head_box.value()}"
    )


def grid_tile_text(pane: Any, x: float, y: float) -> str:
    """'layer 3, head 5: largest thumbnail weight 0.91 · click to show it'."""
    layers, heads = pane._grid_shape
    layer, head = int(y // TILE), int(x // TILE)
    if not (0 <= layer < layers and 0 <= head < heads):
        return ""
    image = pane.tiles.image
    peak = ""
    if image is not None:
        tile = np.asarray(image)[layer * TILE : (layer + 1) * TILE, head * TILE : (head + 1) * TILE]
        peak = (
            f": largest weight in the thumbnail {float(np.nanmax(tile)):.3f}" if tile.size else ""
        )
    return f"layer {layer}, head {head}{peak} · click to show this head"


def logits_bar_text(pane: Any, y: float) -> str:
    """'rank 1: ' type' id 1234 · logit 17.21 · probability 91.20 %'."""
    step, row = pane._step, int(round(y))
    if step is None or not 0 <= row < min(len(step.top_ids), 20):
        return ""
    return (
        f"rank {row + 1}: {_q(step.top_texts[row])} id {int(step.top_ids[row])} · "
        f"logit {float(step.top_logits[row]):.3f} · probability {float(step.top_probs[row]):.4%}"
    )


def sampling_bar_text(pane: Any, stage: str, y: float) -> str:
    """A bar of one stage: the raw token, its logit and raw probability, and after the stage."""
    step, row = pane._step, int(round(y))
    view = next((v for v in pane.views if v.name == stage), None)
    if step is None or view is None or not 0 <= row < len(view.probs):
        return ""
    return (
        f"rank {row + 1}: {_q(step.top_texts[row])} id {int(step.top_ids[row])} · "
        f"logit {float(step.top_logits[row]):.3f} · raw probability "
        f"{float(step.top_probs[row]):.4%} · after {stage}: {float(view.probs[row]):.4%}"
    )


def embedding_point_text(pane: Any, controller: Any, x: float, y: float) -> str:
    """A vocabulary point: token, its PCA coordinates, and its embedding norm where known."""
    token = pane.nearest(x, y)
    if token is None:
        return ""
    xy = pane.projection.coords[token]
    text = pane._texts.get(token)
    norm = embedding_norm(controller, token)
    shown = _q(text) if text is not None else "(text unknown: click for neighbours)"
    known = f" · embedding norm ‖e‖ {norm:.3f}" if norm is not None else ""
    return f"token {token} {shown} · PC1 {float(xy[0]):.3f}, PC2 {float(xy[1]):.3f}{known}"


def embedding_norm(controller: Any, token_id: int) -> float | None:
    """‖e‖ of a token's input embedding, read from the run's records where the token occurs."""
    prefill = controller.prefill
    tokens = context_tokens(controller)
    for pos, info in enumerate(tokens):
        if info.id != token_id:
            continue
        if prefill is not None and pos < prefill.hidden.shape[1]:
            return float(np.linalg.norm(prefill.hidden[0, pos]))
        n = len(controller.prompt)
        step = pos - n + 1  # the step that read the response token at pos
        if 0 < step < len(controller.steps):
            return float(controller.steps[step].residual_norms[0])
    return None


def path_point_text(pane: Any, controller: Any, x: float, y: float) -> str:
    """The nearest point of the layer paths: position, token, layer, coordinates, ‖h‖."""
    paths, prefill = pane.paths, controller.prefill
    if paths is None:
        return ""
    c = np.asarray(paths.coords)  # (tokens, layers + 1, 2)
    pw, ph = pane.paths_plot.getViewBox().viewPixelSize()
    d2 = ((c[..., 0] - x) / (pw or 1)) ** 2 + ((c[..., 1] - y) / (ph or 1)) ** 2
    pos, layer = np.unravel_index(int(np.argmin(d2)), d2.shape)
    if d2[pos, layer] > 64:
        return ""
    tokens = context_tokens(controller)
    text = _q(tokens[pos].text) if pos < len(tokens) else "?"
    norm = ""
    if prefill is not None and pos < prefill.hidden.shape[1]:
        norm = f" · ‖h‖ {float(np.linalg.norm(prefill.hidden[layer, pos])):.3f}"
    where = "embedding" if layer == 0 else f"after layer {layer}"
    return (
        f"position {pos} {text}, {where} · PC1 {float(c[pos, layer, 0]):.3f}, "
        f"PC2 {float(c[pos, layer, 1]):.3f}{norm}"
    )


def angle_text(pane: Any, x: float, y: float) -> str:
    """Positions heatmap: 'position 5 'the', pair 3: angle 1.23 rad (0.42 rad / token)'."""
    view = getattr(pane, "rope", None) if pane.view is not None and pane.view.rope else None
    if view is None:  # a learned table or ALiBi: no rotation angles
        return ""
    row, pair = int(math.floor(y)), int(math.floor(x))
    if not (0 <= row < view.angles.shape[0] and 0 <= pair < view.angles.shape[1]):
        return ""
    tokens = context_tokens(pane.controller)
    text = f" {_q(tokens[row].text)}" if row < len(tokens) else ""
    return (
        f"position {row}{text}, dimension pair {pair}: angle {float(view.angles[row, pair]):.3f} "
        f"rad mod 2π (frequency {float(view.inv_freq[pair]):.4g} rad / token)"
    )


def _watch(plot: Any, label: QLabel, text_of: Any, scene: Any = None) -> None:
    """Call ``text_of(x, y)`` with view coordinates as the mouse moves over ``plot``."""

    def moved(scene_pos: Any) -> None:
        vb = plot.getViewBox()
        if vb.scene() is None or not vb.sceneBoundingRect().contains(scene_pos):
            return
        p = vb.mapSceneToView(scene_pos)
        text = text_of(p.x(), p.y())
        if text:
            label.setText(text)

    (scene or plot.scene()).sigMouseMoved.connect(moved)


def readout_label(pane: Any) -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setToolTip("What is under the mouse")
    pane.layout().addWidget(label)
    pane.readout = label
    return label


def install_hover(panes: dict[str, Any], controller: Any) -> None:
    """Add a readout line under each plotting pane and feed it from its plots."""
    if "Attention" in panes:
        p = panes["Attention"]
        label = readout_label(p)
        _watch(p.map_plot, label, lambda x, y, p=p: attention_cell_text(p, x, y))
        _watch(p.grid_plot, label, lambda x, y, p=p: grid_tile_text(p, x, y))
    if "Logits" in panes:
        p = panes["Logits"]
        _watch(p.plot, readout_label(p), lambda x, y, p=p: logits_bar_text(p, y))
    if "Sampling" in panes:
        p = panes["Sampling"]
        label = readout_label(p)
        for name, plot in p.plots.items():
            _watch(plot, label, lambda x, y, p=p, n=name: sampling_bar_text(p, n, y), p.glw.scene())
    if "Embeddings" in panes:
        p = panes["Embeddings"]
        p._hover_proxy.disconnect()  # this readout says more (coordinates, norm)
        _watch(p.vocab_plot, p.hover, lambda x, y, p=p: embedding_point_text(p, controller, x, y))
        _watch(p.paths_plot, p.hover, lambda x, y, p=p: path_point_text(p, controller, x, y))
    if "Positions" in panes:
        p = panes["Positions"]
        _watch(p.angle_plot, readout_label(p), lambda x, y, p=p: angle_text(p, x, y))
