"""Bring a recorded run back to life on a loaded model, so it can be continued, branched and
compared like a live one.

A session stores every step's records but not the KV cache (it is the largest thing a run
holds, and the model recomputes it exactly). :func:`revive` rebuilds it by reading the
recorded context once, and checks the model against the recording on the way: the logits of
that read must be the last step's recorded logits.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llm_lens.core.errors import PromptError
from llm_lens.core.interventions import Patcher
from llm_lens.core.loop.engine import EAGER_PREFILL_LIMIT, Engine, Run, RunConfig
from llm_lens.core.sampling import SamplingParams

MATCH_TOLERANCE = 1e-3  # of the largest |logit|: float32 on one machine differs by ~1e-6


@dataclass
class Revived:
    """A recorded run made live, and how closely the loaded model reproduces the recording."""

    run: Run  # not to be iterated: its steps are the recording's; continue or branch it
    max_logit_diff: float  # largest |re-read − recorded| over the last step's top-N logits
    logit_scale: float  # largest |recorded logit| of that step

    @property
    def matches(self) -> bool:
        """Whether the loaded model computes what was recorded (up to float rounding)."""
        return self.max_logit_diff <= MATCH_TOLERANCE * max(1.0, self.logit_scale)


def revive(engine: Engine, recorded: Any, cancel: threading.Event | None = None) -> Revived:
    """A :class:`~core.loop.engine.Run` equal to ``recorded`` (a ``SessionRun``) with its
    KV cache rebuilt on ``engine``'s model, under the interventions it was recorded with (so a
    continuation or branch of it keeps them).

    The cache holds the prompt and every generated token but the last, as a finished run's
    does; the sampler's generator is restored when the recording holds its state.
    """
    steps = recorded.steps
    if not steps:
        raise PromptError("the recorded run has no steps to go on from")
    context = [int(i) for i in steps[-1].context_ids]
    prompt_ids = list(recorded.prompt.ids)
    if context[: len(prompt_ids)] != prompt_ids:
        raise PromptError("the recording is inconsistent: its last step did not read its prompt")
    info = engine.info
    if max(context) >= info.vocab_size or min(context) < 0:
        raise PromptError("the recording holds token ids outside the loaded model's vocabulary")
    if len(context) > info.context_length:
        raise PromptError(f"the recording is longer than the model's context ({len(context)})")
    cache = engine.new_cache()
    patcher = _patcher(engine, recorded)
    logits = _reread(engine, cache, context, len(prompt_ids), patcher)
    now = logits.float().cpu().numpy()
    # the top N logits are stored exactly (the rest as float16 since session format 2)
    top = np.asarray(steps[-1].top_ids, np.int64)
    recorded_logits = np.asarray(steps[-1].top_logits, np.float32)
    diff = float(np.max(np.abs(now.reshape(-1)[top] - recorded_logits)))
    fields = {f.name for f in dataclasses.fields(SamplingParams)}
    params = SamplingParams(**{k: v for k, v in recorded.params.items() if k in fields})
    config = RunConfig(max_new_tokens=len(steps), top_n=len(steps[0].top_ids))
    run = Run(
        engine,
        recorded.prompt,
        params,
        config,
        cancel or threading.Event(),
        run_id=recorded.run_id,
        steps=list(steps),
        prefill=recorded.prefill,
        finish_reason=recorded.finish_reason,
        cache=cache,
        patcher=patcher,
    )
    if recorded.generator_state is not None:
        run.generator = _generator(recorded.generator_state)
    return Revived(run, diff, float(np.max(np.abs(recorded_logits))))


def _patcher(engine: Engine, recorded: Any) -> Patcher | None:
    changes = tuple(getattr(recorded, "interventions", ()) or ())
    return Patcher(engine.model, engine.anatomy, changes) if changes else None


def _reread(
    engine: Engine, cache: Any, context: list[int], prompt: int, patcher: Patcher | None
) -> Any:
    """The context read into ``cache``; its last logits. Under interventions the prompt is read
    first, on its own, as the run read it (a head's prompt mean is the prompt's)."""
    eager = len(context) <= EAGER_PREFILL_LIMIT
    with torch.inference_mode():
        if patcher is None:
            return engine.forward(torch.tensor([context], device=engine.device), cache, eager)
        with patcher.active():
            parts = [context[:prompt], context[prompt:]]
            logits = None
            for part in (p for p in parts if p):
                ids = torch.tensor([part], device=engine.device)  # (1, part)
                logits = engine.forward(ids, cache, eager)
            return logits


def _generator(state: np.ndarray) -> Any:
    generator = torch.Generator(device="cpu")
    try:
        generator.set_state(torch.from_numpy(np.array(state, np.uint8)))
    except (RuntimeError, ValueError):
        raise PromptError("the recording's sampler state is damaged") from None
    return generator
