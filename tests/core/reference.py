"""The reference path for the bundled model's fidelity tests: transformers' own forward.

Every reference here is computed by calling the transformers model directly (no cache, eager
attention), never through ``core``.
"""

from __future__ import annotations

import torch

PROMPT = "Explain transformers like I am 12"
N_GREEDY = 20


def eager_forward(model, ids, **kw):
    """A fresh full forward without a cache, eager attention (the reference path)."""
    model.set_attn_implementation("eager")
    with torch.inference_mode():
        return model(torch.tensor([list(ids)]), use_cache=False, **kw)
