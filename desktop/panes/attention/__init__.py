"""The Attention pane: one head's causal map and a grid of every head (:mod:`.pane`), the
geometry and readouts of its cells and tiles (:mod:`.cells`), the map's token axes and colour
scale (:mod:`.axes`) and its header line (:mod:`.header`)."""

from llm_lens.desktop.panes.attention.cells import TILE, overview_cell, strip, strip_bin
from llm_lens.desktop.panes.attention.header import gqa_note
from llm_lens.desktop.panes.attention.pane import MAP_SIZE, AttentionPane

__all__ = ["MAP_SIZE", "TILE", "AttentionPane", "gqa_note", "overview_cell", "strip", "strip_bin"]
