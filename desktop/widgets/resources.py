"""Where the app's shipped files (example prompts, icons) are: inside the installed package."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path


def resource_dir() -> Path:
    """``llm_lens/resources`` as installed; ``LLM_LENS_RESOURCES`` overrides (frozen bundles)."""
    override = os.environ.get("LLM_LENS_RESOURCES")
    return Path(override) if override else Path(str(files("llm_lens.resources")))
