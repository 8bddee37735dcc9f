"""Self-attention: each head's probabilities, taken from the model's own attention function.

transformers routes attention through ``AttentionInterface``: each attention module computes its
post-RoPE queries and keys, its mask (causal, sliding window, ALiBi bias) and its scaling, and hands
them to the function registered for ``config._attn_implementation``. LLM Lens registers one more,
:data:`ATTN_IMPLEMENTATION`, that runs the model's own eager function (or SDPA, for speed) on
exactly those tensors and records probabilities from the eager function, so every family's maths
(soft-capping, sinks, windows, ALiBi, partial rotary) is the model's, not a copy.

This package only names its parts, each a module with one job:

- :mod:`.lens` the registered attention function and routing a model through it
- :mod:`.taps` what one forward pass records (:class:`Tap`, :func:`tapping`, :class:`MapReady`)
- :mod:`.maps` the eager function run a row block at a time and max-pooled over the prompt, and
  work done ahead (:func:`halting`)
- :mod:`.prompt_maps` the prompt re-run that recomputes a layer's maps, and the maps kept for the
  next request
- :mod:`.verdicts` whether a model reproduces through that function, asked once per weights
  (:func:`route_checked`)
- :mod:`.views` the entry points: one head's map (:func:`attention_map`) and every head's
  thumbnail (:func:`attention_overview`)
"""

from llm_lens.core.attention.lens import (
    ATTN_IMPLEMENTATION,
    lens_attention,
    own_eager,
    register,
    use_lens_attention,
)
from llm_lens.core.attention.maps import (
    AttentionMap,
    Halted,
    halt_check,
    halting,
    kv_head,
    pool_rows,
)
from llm_lens.core.attention.maps import _block_mask as _block_mask  # for the tests
from llm_lens.core.attention.maps import _CausalMasks as _CausalMasks
from llm_lens.core.attention.taps import (
    AttentionInputs,
    MapReady,
    Tap,
    current_tap,
    tapping,
)
from llm_lens.core.attention.views import attention_map, attention_overview

__all__ = [
    "ATTN_IMPLEMENTATION",
    "AttentionInputs",
    "AttentionMap",
    "Halted",
    "MapReady",
    "Tap",
    "attention_map",
    "attention_overview",
    "current_tap",
    "halt_check",
    "halting",
    "kv_head",
    "lens_attention",
    "own_eager",
    "pool_rows",
    "register",
    "tapping",
    "use_lens_attention",
]
