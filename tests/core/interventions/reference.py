"""Hand-written references for the intervention tests: a greedy loop through transformers' own
forward (eager attention, a DynamicCache), with whatever hooks or mask the test installs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY

PROMPT = "The river bank was full of fish and the"
STEPS = 4
CACHE_KW = "cache"  # transformers 5 renamed past_key_values


def greedy_reference(
    model: Any, ids: list[int], steps: int = STEPS, mask: Callable[[int], Any] | None = None
) -> tuple[list[int], np.ndarray]:
    """(tokens, first step's logits) of a greedy run through the model's own eager forward;
    ``mask(length)`` gives the 2-D attention mask over ``length`` tokens, if any."""
    from transformers import DynamicCache

    model.set_attn_implementation("eager")
    cache = DynamicCache(config=model.config)
    context = list(ids)
    feed = torch.tensor([context])  # (1, prompt_len)
    tokens: list[int] = []
    first = None
    with torch.inference_mode():
        for _ in range(steps):
            extra = {} if mask is None else {"attention_mask": mask(len(context))}
            # positions given: OPT would derive them from a 2-D mask's running sum
            done = len(context) - feed.shape[1]
            extra["position_ids"] = torch.arange(done, len(context))[None]  # (1, seq)
            out = model(feed, **{CACHE_KW: cache}, use_cache=True, **extra)
            logits = out.logits[0, -1].float()  # (vocab,)
            first = logits.numpy().copy() if first is None else first
            token = int(logits.argmax())
            tokens.append(token)
            context.append(token)
            feed = torch.tensor([[token]])  # (1, 1)
    assert first is not None
    return tokens, first


def engine_greedy(
    engine: Engine, interventions: list[Any], steps: int = STEPS
) -> tuple[list[int], np.ndarray, Any]:
    """(tokens, first step's logits, the run) of the engine's greedy run with ``interventions``."""
    prompt = engine.tokenize(PROMPT, chat=False)
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=steps), interventions=interventions)
    run.run_all()
    return run.generated_ids, run.steps[0].logits, run


def assert_same(
    ours: tuple[list[int], np.ndarray, Any], reference: tuple[list[int], np.ndarray]
) -> None:
    """Same tokens, and first-step logits equal to 1e-4."""
    assert ours[0] == reference[0]
    np.testing.assert_allclose(ours[1], reference[1], atol=1e-4, rtol=0)
