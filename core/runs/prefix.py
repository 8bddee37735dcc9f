"""Prefix reuse: a run of an edited prompt reads only the suffix the previous run's KV cache
does not already hold.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_lens.core.interventions import Intervention
from llm_lens.core.loop.engine import Engine, Run, RunConfig, RunStart, copy_cache
from llm_lens.core.records import PrefillCapture, PromptTokens, frozen
from llm_lens.core.runs.branching import crop_to
from llm_lens.core.sampling import SamplingParams


@dataclass(frozen=True)
class PrefixReuse:
    """How much of a prompt came from the previous run's cache."""

    tokens_reused: int
    prompt_tokens: int

    @property
    def suffix_tokens(self) -> int:
        return self.prompt_tokens - self.tokens_reused


def joined_prefill(prev: Run | None, run: Run, reused: int) -> PrefillCapture | None:
    """The whole-prompt capture of a run that read its first ``reused`` tokens from ``prev``'s
    cache: those positions' states come from ``prev`` (its prefill, then what each of its decode
    steps read), the rest from the run's own prefill. Unchanged when nothing was reused."""
    if not reused or prev is None or prev.prefill is None or run.prefill is None:
        return run.prefill
    read = [prev.prefill.hidden] + [s.hidden[:, None] for s in prev.steps[1:]]
    head = np.concatenate(read, axis=1)[:, :reused]  # (layers + 1, reused, hidden)
    hidden = np.concatenate([head, run.prefill.hidden], axis=1)
    positions = frozen(np.arange(len(run.prompt)), np.int64)
    return PrefillCapture(run.run_id, run.prompt, frozen(hidden), positions)


def ttft_saved_ms(full: Run, reused: Run) -> float:
    """Measured: the full prompt's prefill time minus the suffix-only prefill time."""
    return full.steps[0].timing.forward_ms - reused.steps[0].timing.forward_ms


class PrefixCache:
    """The last finished run's context ids and KV cache, so an edited prompt reads only its new
    suffix. The stored cache is never extended: :meth:`reuse` hands out cropped copies."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.cache: Any = None
        self.interventions: tuple[Intervention, ...] = ()  # what the cache was computed under
        self.own_prompt = False  # an intervention read the whole prompt: reuse none of it

    def remember(self, run: Run) -> None:
        """Keep a finished run's cache: it holds the prompt and every generated token but the
        last (which was chosen, never read). The cache is keyed by the run's interventions."""
        if not run.steps or run.cache is None:
            return
        self.ids = [int(i) for i in run.steps[-1].context_ids]
        self.cache = run.cache
        self.interventions = tuple(run.interventions)
        self.own_prompt = run.patcher is not None and run.patcher.reads_prompt

    def reuse(
        self, prompt_ids: Sequence[int], interventions: Sequence[Intervention] = ()
    ) -> tuple[int, Any]:
        """(longest common prefix, cropped cache copy or None). At least one token is left to
        read, since the prefill's logits are those of the prompt's last token. A cache computed
        under other interventions than ``interventions`` is never reused (nor one whose
        interventions read its whole prompt: a head's prompt mean)."""
        if tuple(interventions) != self.interventions or self.own_prompt:
            return 0, None
        n = 0
        limit = min(len(self.ids), len(prompt_ids) - 1)
        while n < limit and self.ids[n] == prompt_ids[n]:
            n += 1
        if n == 0 or self.cache is None:
            return 0, None
        cache = copy_cache(self.cache)
        crop_to(cache, n)
        return n, cache

    def start(
        self,
        engine: Engine,
        prompt: PromptTokens,
        params: SamplingParams,
        run_config: RunConfig,
        cancel: threading.Event | None = None,
        interventions: Sequence[Intervention] = (),
    ) -> tuple[Run, PrefixReuse]:
        """A run of ``prompt`` (under ``interventions``) that prefills only what the cache does
        not already hold."""
        n, cache = self.reuse(prompt.ids, interventions)
        if cache is None:  # a fresh start: exactly Engine.start
            run = engine.start(prompt, params, run_config, cancel, interventions)
            return run, PrefixReuse(0, len(prompt))
        start = RunStart(cache)
        run = engine.start_from(prompt, params, start, run_config, cancel, interventions)
        return run, PrefixReuse(n, len(prompt))
