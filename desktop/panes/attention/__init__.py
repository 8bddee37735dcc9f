"""The Attention pane: one head's causal map and a grid of every head (:mod:`.pane`), and the
geometry and readouts of its cells and tiles (:mod:`.cells`)."""

from llm_lens.desktop.panes.attention.cells import TILE, overview_cell, strip, strip_bin
from llm_lens.desktop.panes.attention.pane import MAP_SIZE, AttentionPane, gqa_note

__all__ = ["MAP_SIZE", "TILE", "AttentionPane", "gqa_note", "overview_cell", "strip", "strip_bin"]
