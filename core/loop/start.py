"""Where a run begins when not from an empty cache: a cache holding a prefix of the prompt, and
perhaps the prompt's logits already read (:meth:`llm_lens.core.loop.engine.Engine.prefill`).

Branches and shared prompt prefixes (:mod:`llm_lens.core.runs`) start runs from one; each run
gets its own deep copy of the cache, so runs never extend a shared one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from llm_lens.core.loop.capture import Capture


@dataclass
class RunStart:
    """Where a run begins when not from an empty cache.

    ``cache`` already holds the first ``cached_tokens`` tokens of the prompt; the run prefills only
    the rest. With ``logits`` (and ``capture``) the whole prompt has been read already: step 0
    makes no forward pass and samples from these logits, ``forward_ms`` being what they cost.
    """

    cache: Any
    logits: Any | None = None  # (vocab,) torch tensor: the prompt's last-position logits
    capture: Capture | None = None
    forward_ms: float = 0.0

    @property
    def cached_tokens(self) -> int:
        return int(self.cache.get_seq_length())

    @property
    def is_full(self) -> bool:
        """True when the whole prompt is read: step 0 reuses ``logits`` and ``capture``."""
        return self.logits is not None and self.capture is not None

    def fork(self) -> RunStart:
        """The same start with a cache of its own (a deep copy), so runs never share one."""
        return RunStart(copy_cache(self.cache), self.logits, self.capture, self.forward_ms)


def copy_cache(cache: Any) -> Any:
    """A deep copy of a transformers cache: the copy can be cropped or extended independently."""
    return copy.deepcopy(cache)
