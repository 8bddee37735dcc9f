"""The Layer stack pane: norms through the layers, the logit lens and the prompt lens
(:mod:`.pane`), and the logit lens as a table (:mod:`.lens_table`)."""

from llm_lens.desktop.panes.layers.lens_table import LENS_K, first_agreement, lens_cell, shown
from llm_lens.desktop.panes.layers.pane import (
    NAN_RED,
    PROMPT_LENS_TOKENS,
    RESID_TITLE,
    WAIT_TEXT,
    LayerStackPane,
)

__all__ = [
    "LENS_K",
    "NAN_RED",
    "PROMPT_LENS_TOKENS",
    "RESID_TITLE",
    "WAIT_TEXT",
    "LayerStackPane",
    "first_agreement",
    "lens_cell",
    "shown",
]
