"""LLM Lens: watch a real language model turn a prompt into a response, step by step.

The notebook face of the pipeline (nothing here imports Qt)::

    from llm_lens import Engine, SamplingParams, load_model

    engine = Engine(load_model())                      # the bundled SmolLM2-135M-Instruct
    run = engine.start(engine.tokenize("Explain transformers like I am 12"), SamplingParams())
    for step in run:                                   # one StepRecord per generated token
        print(repr(step.token.text), f"p={step.prob:.2f}", f"rank={step.rank}")

What if? The same run with a part of the model changed (hooks on for that run only)::

    from llm_lens import HeadEdit, parse_spec

    changed = engine.start(prompt, GREEDY, interventions=[HeadEdit(7, 4), parse_spec("mlp:12*0.5")])

``llm_lens.core`` holds one module per stage of the journey (tokens, embeddings, positions,
attention, layers, kvcache, logits, sampling) and the loop, runs, sessions, exports and CLI
apart; ``llm_lens.desktop`` is the Qt app. Names are imported lazily, so ``import llm_lens``
costs nothing until one is used.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "GREEDY",
    "BlockEdit",
    "Engine",
    "ExpertEdit",
    "Forget",
    "HeadEdit",
    "ResidualAdd",
    "ResidualPatch",
    "RunConfig",
    "SamplingParams",
    "StepRecord",
    "generate_text",
    "load_model",
    "parse_spec",
]
_INTERVENTIONS = "llm_lens.core.interventions"

_WHERE = {
    "Engine": "llm_lens.core.loop.engine",
    "RunConfig": "llm_lens.core.loop.engine",
    "generate_text": "llm_lens.core.loop.engine",
    "load_model": "llm_lens.core.loading",
    "SamplingParams": "llm_lens.core.sampling",
    "GREEDY": "llm_lens.core.sampling",
    "StepRecord": "llm_lens.core.records",
    **{
        name: _INTERVENTIONS
        for name in (
            "BlockEdit",
            "ExpertEdit",
            "Forget",
            "HeadEdit",
            "ResidualAdd",
            "ResidualPatch",
            "parse_spec",
        )
    },  # fmt: skip
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'llm_lens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
