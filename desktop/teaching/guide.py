"""Words on the controls and plots: tooltips on everything that changes what the model does,
legends on multi-series plots, units on axes, and the similarity metric named."""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt

SAMPLING_TIPS = {
    "temperature": "Divides every logit before the softmax: below 1 sharpens the distribution "
    "(the likely token gets likelier), above 1 flattens it; 0 means always take the top token",
    "temp_slider": "Temperature: drag to watch the distributions below sharpen or flatten",
    "top_k": "Keep only the k most probable tokens and renormalise (off: keep all)",
    "top_p": "Nucleus sampling: keep the smallest set of top tokens whose probabilities add "
    "up to p, drop the rest and renormalise (1 = off)",
    "min_p": "Drop every token whose probability is below min-p × the top token's "
    "probability (0 = off)",
    "repetition_penalty": "Makes tokens already in the context less likely: positive logits "
    "are divided by it, negative ones multiplied (1 = off)",
    "seed": "Seeds the random generator of the draw: the same seed and settings draw the same "
    "tokens again (random: a fresh seed each run)",
    "greedy": "Always take the most probable token (argmax); no randomness",
}

PROMPT_TIPS = {
    "max_tokens": "The run stops after this many new tokens (or earlier at end-of-turn)",
    "chat_box": "On: the prompt is wrapped in the model's chat template (system/user/"
    "assistant turns, the <|im_start|> tokens) as in a chat app. Off: raw mode, the model "
    "reads exactly the text you typed",
    "examples_box": "Example prompts; the first is the article's",
    "run_button": "Run the prompt through the model with the sampling settings (Ctrl+Enter)",
    "stop_button": "Stop the running generation after the current step (Esc)",
}


def apply_tooltips(window: Any) -> None:
    """Tooltips on the prompt panel's and the Sampling pane's controls."""
    panel = window.prompt_panel
    for name, tip in PROMPT_TIPS.items():
        widget = getattr(panel, name, None)
        if widget is not None:
            widget.setToolTip(tip)
    sampling = window.panes.get("Sampling")
    if sampling is not None:
        for name, tip in SAMPLING_TIPS.items():
            getattr(sampling.controls, name).setToolTip(tip)
    attention = window.panes.get("Attention")
    if attention is not None:
        attention.layer_box.setToolTip("Which of the model's layers (0 = first) to show")
        attention.head_box.setToolTip(
            "Which query head of that layer; heads sharing a KV head (GQA) are grouped by the "
            "white lines in the grid"
        )
    layers = window.panes.get("Layer stack")
    if layers is not None:
        layers.tabs.setTabToolTip(
            0,
            "Logit lens: the final norm and unembedding applied to each layer's residual — "
            "what the model would say if it stopped at that layer",
        )
        layers.resid_plot.setToolTip("Residual stream: the vector each layer reads and adds to")


def add_legends(panes: dict[str, Any]) -> None:
    """Legends on the multi-series plots; units and metrics named on axes and lists."""
    emb = panes.get("Embeddings")
    if emb is not None:
        legend = emb.vocab_plot.addLegend(offset=(5, 5), labelTextSize="8pt")
        legend.addItem(emb.vocab, "vocabulary rows")
        legend.addItem(emb.prompt_dots, "prompt tokens")
        legend.addItem(emb.response_dots, "response tokens")
        legend.addItem(emb.neighbour_dots, "nearest (cosine)")
        paths = emb.paths_plot.addLegend(offset=(5, 5), labelTextSize="8pt")
        paths.addItem(emb.start_dots, "embedding (layer 0)")
        paths.addItem(emb.end_dots, "after the last layer")
        for plot in (emb.vocab_plot, emb.paths_plot):
            plot.setLabel("bottom", "PC1 (embedding units)")
            plot.setLabel("left", "PC2 (embedding units)")
        emb.neighbour_title.setText("Click a token for its nearest neighbours (cosine similarity)")
    layers = panes.get("Layer stack")
    if layers is not None:
        legend = layers.resid_plot.addLegend(offset=(5, 5), labelTextSize="8pt")
        legend.addItem(layers.resid_curve, "‖h‖ after each layer")
        dashed = pg.PlotDataItem(pen=pg.mkPen("#81c784", style=Qt.PenStyle.DashLine))
        # the first layer whose lens top-1 is the final token, marked ★ as in the lens table
        legend.addItem(dashed, "★ lens top-1 = final")
        layers.resid_plot.setLabel("left", "‖h‖ (L2 norm)")
        layers.update_plot.setLabel("left", "‖update‖ (L2 norm)")
        layers.heat_plot.setLabel("bottom", "prompt position (token)")
    attention = panes.get("Attention")
    if attention is not None:
        attention.map_plot.setLabel("left", "query token (reads)")
        attention.map_plot.setLabel("bottom", "key token (is read)")
        attention.bar.setLabel("right", "attention weight")
    sampling = panes.get("Sampling")
    if sampling is not None:
        for plot in sampling.plots.values():
            plot.setLabel("bottom", "probability")
    positions = panes.get("Positions")
    if positions is not None:
        positions.freq_plot.setLabel("left", "rad / token")
        positions.score_plot.setLabel("left", "q·k (relative)")
        positions.angle_plot.setTitle("angle mod 2π (rad)")


def cosine_label(similarity: float, text: str, token_id: int) -> str:
    """A nearest-neighbour line that names its metric: 'cosine 0.673  ·bank  (4567)'."""
    return f"cosine {similarity:.3f}  {text}  ({token_id})"
