"""What the main window is made of: its panes in the journey's order, the example prompts it
offers, and where its saved state lives."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings

from llm_lens.desktop.widgets.resources import resource_dir


def load_examples() -> list[dict[str, Any]]:
    """The example prompts shipped in ``resources/prompts.json`` (the article's first)."""
    path = resource_dir() / "prompts.json"
    try:
        return list(json.loads(path.read_text(encoding="utf-8"))["prompts"])
    except (OSError, ValueError, KeyError):
        return [
            {
                "title": "The article's prompt",
                "text": "Explain transformers like I am 12",
                "chat": True,
            }
        ]


def settings() -> QSettings:
    """Window state lives in the user's config folder (``$LLM_LENS_CONFIG_DIR`` overrides)."""
    folder = os.environ.get("LLM_LENS_CONFIG_DIR")
    if folder:
        return QSettings(str(Path(folder) / "llm-lens.ini"), QSettings.Format.IniFormat)
    return QSettings("llm-lens", "LLM Lens")


def pane_classes() -> list[type]:
    from llm_lens.desktop.panes.attention import AttentionPane
    from llm_lens.desktop.panes.attention_lines import AttentionLinesPane
    from llm_lens.desktop.panes.attribution import AttributionPane
    from llm_lens.desktop.panes.embeddings import EmbeddingsPane
    from llm_lens.desktop.panes.experts import ExpertsPane
    from llm_lens.desktop.panes.kvcache import KVCachePane
    from llm_lens.desktop.panes.layers import LayerStackPane
    from llm_lens.desktop.panes.logits import LogitsPane
    from llm_lens.desktop.panes.positions import PositionsPane
    from llm_lens.desktop.panes.sampling import SamplingPane
    from llm_lens.desktop.panes.timing import TimingPane
    from llm_lens.desktop.panes.tokens import TokensPane
    from llm_lens.desktop.panes.whatif import WhatIfPane

    return [
        TokensPane,
        EmbeddingsPane,
        PositionsPane,
        AttentionPane,
        AttentionLinesPane,
        LayerStackPane,
        ExpertsPane,
        WhatIfPane,
        KVCachePane,
        LogitsPane,
        SamplingPane,
        TimingPane,
        AttributionPane,
    ]
