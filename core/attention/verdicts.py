"""Whether a model's logits are the same through LLM Lens' attention function, asked once per
weights: every Engine made over a model runs :func:`~llm_lens.core.attention.lens.reproduces`
(two 8-token forwards, the guard against silently different attention), so a reload or a
switch back to the same weights would pay it again. :func:`route_checked` keeps the verdict per
``weights_id`` (with the model's class, config, dtype and device, which decide the code path)
for the process's life.
"""

from __future__ import annotations

from typing import Any

from llm_lens.core.attention.lens import use_lens_attention

MAX_KEPT = 64  # verdicts kept (one per weights and configuration: a few bytes each)
_VERDICTS: dict[tuple[str, ...], bool] = {}


def verdict_key(model: Any, weights_id: str) -> tuple[str, ...] | None:
    """What a verdict holds for: the weights and what decides the attention code they run;
    None where the weights have no identity (a model built in memory), never cached."""
    if not weights_id:
        return None
    try:
        config = model.config.to_json_string(use_diff=False)
        param = next(model.parameters())
    except Exception:  # noqa: BLE001 - a model that cannot say what it is is checked each time
        return None
    kind = f"{type(model).__module__}.{type(model).__qualname__}"
    return (weights_id, kind, config, str(param.dtype), str(param.device))


def route_checked(model: Any, weights_id: str) -> bool:
    """:func:`~llm_lens.core.attention.lens.use_lens_attention` with ``check``, its verdict
    remembered for these weights: True where the model now runs LLM Lens' attention function,
    False where it keeps its own (it bypasses the interface, or does not reproduce)."""
    key = verdict_key(model, weights_id)
    known = None if key is None else _VERDICTS.get(key)
    if known is True:
        return use_lens_attention(model)
    if known is False:
        can_set = getattr(type(model), "_can_set_attn_implementation", None)
        if callable(can_set) and can_set():
            model.set_attn_implementation("eager")  # as the check that refused it left it
        return False
    verdict = use_lens_attention(model, check=True)
    if key is not None:
        if len(_VERDICTS) >= MAX_KEPT:
            _VERDICTS.pop(next(iter(_VERDICTS)))
        _VERDICTS[key] = verdict
    return verdict
