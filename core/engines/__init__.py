"""Engines: where a model runs (this process, an OpenAI-compatible server, NDIF) behind one
small protocol (:mod:`llm_lens.core.engines.base`); ``local`` adapts today's transformers
:class:`~llm_lens.core.loop.engine.Engine` to it. Only re-exports; imports no torch."""

from llm_lens.core.engines.base import (
    CAPABILITIES,
    Capability,
    EngineIdentity,
    EngineRun,
    ModelEngine,
    Provides,
    public_url,
)

__all__ = [
    "CAPABILITIES",
    "Capability",
    "EngineIdentity",
    "EngineRun",
    "ModelEngine",
    "Provides",
    "public_url",
]
