"""The Timing card: the prefill's time to first token against a later step's mean (the
figures the Timing pane names: TTFT and the mean inter-token latency)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from llm_lens.core.cards.common import Explainer, count
from llm_lens.core.records import StepRecord


def timing_card(steps: Sequence[StepRecord], n_prompt: int) -> Explainer:
    shows = (
        "Milliseconds per step, split into the forward pass, sampling and capture: the "
        "prefill reads the whole prompt at once, each later step one token and the cache."
    )
    if not steps:
        return Explainer("No run yet.", shows)
    first = steps[0].timing.total_ms
    rest = [s.timing.total_ms for s in steps[1:]]
    headline = (
        f"The prefill read {count(n_prompt, 'token')} in {first:.1f} ms (time to first token)"
    )
    if rest:  # the mean: the Timing pane's "mean inter-token latency", the same figure
        headline += f"; a later step took {float(np.mean(rest)):.1f} ms (mean inter-token latency)"
    return Explainer(headline + ".", shows, (), (), "Run with a longer prompt: only TTFT grows.")
