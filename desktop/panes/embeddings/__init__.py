"""The Embeddings pane: the vocabulary map and the layer paths (:mod:`.pane`), and what it reads
out about a point and the selected token (:mod:`.readouts`)."""

from llm_lens.desktop.panes.embeddings.pane import EmbeddingsPane

__all__ = ["EmbeddingsPane"]
