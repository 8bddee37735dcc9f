"""The local transformers engine as a :class:`~llm_lens.core.engines.base.ModelEngine`: an
adapter over :class:`~llm_lens.core.loop.engine.Engine`, which it leaves as it is."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llm_lens.core.engines.base import EngineIdentity, Provides
from llm_lens.core.records import ModelInfo, PromptTokens, StepRecord

if TYPE_CHECKING:
    from llm_lens.core.layers import LensResult
    from llm_lens.core.loop.engine import Engine, Run, RunConfig
    from llm_lens.core.sampling import SamplingParams

ATTENTION_REMEDY = "open it with attention through transformers' interface for maps"


class LocalEngine:
    """A model loaded in this process: every record, the whole distribution."""

    name = "local"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def identity(self) -> EngineIdentity:
        info = self.engine.info
        return EngineIdentity(
            self.name, info.name, None, (("source", info.source), ("weights_id", info.weights_id))
        )

    @property
    def provides(self) -> Provides:
        """Everything, less attention for a family whose attention bypasses the interface."""
        full = Provides.everything()
        if self.engine.attention_maps:
            return full
        note = (
            self.engine.info.attention_note
            or f"this family has no attention maps here: {ATTENTION_REMEDY}"
        )
        return Provides(full.fills - {"attention"}, {"attention": note}, top_n=-1)

    @property
    def info(self) -> ModelInfo:
        return self.engine.info

    def tokenize(
        self, text: str, chat: bool = True, system: str | None = None, parse_special: bool = False
    ) -> PromptTokens:
        return self.engine.tokenize(text, chat, system, parse_special)

    def start(
        self,
        prompt: PromptTokens,
        params: SamplingParams,
        config: RunConfig | None = None,
        cancel: threading.Event | None = None,
        interventions: Sequence[Any] = (),
    ) -> Run:
        return self.engine.start(prompt, params, config, cancel, interventions=interventions)

    def logit_lens(self, step: StepRecord, k: int = 5) -> LensResult | None:
        from llm_lens.core.layers import logit_lens

        return logit_lens(self.engine, step, k)
