"""The Sampling pane (:mod:`.pane`), its settings widgets (:mod:`.controls`) and the stages it
plots (:mod:`.stages`)."""

from llm_lens.desktop.panes.sampling.controls import SamplingControls
from llm_lens.desktop.panes.sampling.pane import NOTE, NOTE_LIVE, SamplingPane
from llm_lens.desktop.panes.sampling.stages import StageView, recorded_views, stage_views

__all__ = [
    "NOTE",
    "NOTE_LIVE",
    "SamplingControls",
    "SamplingPane",
    "StageView",
    "recorded_views",
    "stage_views",
]
