"""The KV cache: the bytes it holds, measured from its tensors, and the formula that predicts them.

One package for both sides of the same number, each a module with one job:

- :mod:`.formula` :class:`KVLayout` and :func:`formula_bytes`: Σ over layers of 2 × kv_heads ×
  head_dim × bytes × tokens held (a sliding-window layer holds at most window − 1)
- :mod:`.measure` what a transformers cache holds right now (:func:`measure`, a
  :class:`~llm_lens.core.records.KVCacheStats` per step)
- :mod:`.config` a model's :class:`KVLayout` from its config.json's fields, without weights
- :mod:`.config_file` finding and reading that config.json (a path, a folder or a hub id)
- :mod:`.report` the figures and lines of ``llm-lens kv``
"""

from llm_lens.core.kvcache.config import layout_from_config
from llm_lens.core.kvcache.config_file import MAX_CONFIG_BYTES, load_config
from llm_lens.core.kvcache.formula import (
    MAX_COUNT,
    ConfigError,
    KVLayout,
    formula_bytes,
    held_tokens,
)
from llm_lens.core.kvcache.measure import (
    bytes_by_device,
    cache_tensors,
    cache_windows,
    measure,
    seen_tokens,
)
from llm_lens.core.kvcache.report import (
    DEFAULT_DTYPE,
    DEFAULT_TOKENS,
    build_report,
    dtype_bytes,
    format_report,
    kv_report,
)

__all__ = [
    "DEFAULT_DTYPE",
    "DEFAULT_TOKENS",
    "MAX_CONFIG_BYTES",
    "MAX_COUNT",
    "ConfigError",
    "KVLayout",
    "build_report",
    "bytes_by_device",
    "cache_tensors",
    "cache_windows",
    "dtype_bytes",
    "format_report",
    "formula_bytes",
    "held_tokens",
    "kv_report",
    "layout_from_config",
    "load_config",
    "measure",
    "seen_tokens",
]
