"""The attention function LLM Lens registers with transformers, and routing a model through it.

transformers routes attention through ``AttentionInterface``: each attention module computes its
post-RoPE queries and keys, its mask and its scaling, and hands them to the function registered for
``config._attn_implementation``. :func:`lens_attention` runs the module's own eager function (or
SDPA, for speed) on exactly those tensors and tells the current :class:`~.taps.Tap` what it saw.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from llm_lens.core.attention.maps import _block_mask
from llm_lens.core.attention.taps import current_tap

ATTN_IMPLEMENTATION = "llm_lens"
_EAGER: dict[type, Callable[..., Any]] = {}


def own_eager(module: Any) -> Callable[..., Any]:
    """The eager attention function of the module's own modeling file (e.g. Gemma 2's applies
    soft-capping, GPT-2's has no float32 softmax); Llama's where a file defines none."""
    kind = type(module)
    if kind not in _EAGER:
        from transformers.models.llama.modeling_llama import eager_attention_forward

        own = getattr(sys.modules.get(kind.__module__), "eager_attention_forward", None)
        _EAGER[kind] = own or eager_attention_forward
    return _EAGER[kind]


def lens_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any
) -> tuple[Any, Any]:
    """The registered attention function: the model's attention, plus what the tap asks for.

    ``query`` (batch, heads, q, head_dim) and ``key``/``value`` (batch, kv_heads, kv, head_dim)
    arrive rotated and cache-extended; ``attention_mask`` is transformers' SDPA mask (None for
    plain causal attention, else boolean), which SDPA takes as it is (causal: its fused kernel,
    no T × T tensor) and the eager function as the additive mask it expects.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    attention_mask = selected_keys_mask(attention_mask, kwargs.pop("indices", None), query, key)
    tap, eager = current_tap(), own_eager(module)
    if tap is not None and tap.layer_of.get(id(module), -1) in tap.maps:
        # a prompt-map pass: record (the last asked layer ends the pass here) and hand back
        # zeros; no later computation reads this layer's output, since the next asked layer's
        # input is replaced and the layers between are passed over
        tap.observe(module, eager, (query, key, value, attention_mask), None, kwargs)
        batch, heads, q_len, _ = query.shape
        return query.new_zeros((batch, q_len, heads, value.shape[-1])), None
    fast = tap is not None and tap.fast and kwargs.get("softcap") is None
    if fast:
        output, weights = sdpa_attention_forward(
            module, query, key, value, attention_mask, **kwargs
        )
    else:
        q_len, keys = query.shape[2], key.shape[2]
        additive = _block_mask(
            attention_mask, 0, q_len, keys - q_len, keys, query.dtype, query.device
        )
        if additive is None:  # nothing masked; ModernBERT's eager function adds it regardless
            additive = query.new_zeros((1, 1, q_len, keys))
        output, weights = eager(module, query, key, value, additive, **kwargs)
    if tap is not None and id(module) in tap.layer_of:
        tap.observe(module, eager, (query, key, value, attention_mask), weights, kwargs)
    return output, weights


def selected_keys_mask(mask: Any, indices: Any, query: Any, key: Any) -> Any:
    """The mask with a sparse-attention indexer's selection folded in (DeepSeek-V3.2's and
    GLM-MoE-DSA's DSA: ``indices`` (batch, q, top-k) are the keys each query reads), as the
    model's own eager path folds it; ``mask`` unchanged without ``indices``. Boolean (True:
    read), so the fast path, the eager function and every map later drawn from these tensors
    read exactly the keys the model's indexer picked."""
    if indices is None:
        return mask
    import torch

    batch, _heads, q_len, _ = query.shape
    keys = key.shape[2]
    chosen = torch.zeros((batch, 1, q_len, keys), dtype=torch.bool, device=query.device)
    chosen.scatter_(-1, indices.long().unsqueeze(1), True)  # (batch, 1, q, keys)
    if mask is None:
        causal = _block_mask(None, 0, q_len, keys - q_len, keys, query.dtype, query.device)
        return chosen if causal is None else chosen & (causal == 0)
    allowed = mask if mask.dtype == torch.bool else mask == 0
    return allowed[..., :q_len, :keys] & chosen


def register() -> None:
    """Register :func:`lens_attention`, with transformers' SDPA mask (None for plain causal
    attention: no T × T float mask is built, and SDPA runs its causal kernel, twice as fast as
    with a float mask at 4,096 tokens), once per process."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, lens_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)


def use_lens_attention(model: Any, check: bool = False) -> bool:
    """Route the model's attention through :func:`lens_attention`; False for a family whose
    attention does not go through transformers' interface (no maps for it, nothing else lost).
    ``check``: first make sure the model computes the same logits through it as through its
    own eager attention (:func:`reproduces`); where not, it keeps its own, and False."""
    can_set = getattr(type(model), "_can_set_attn_implementation", None)
    if not (callable(can_set) and can_set()):
        return False
    register()
    if check and not reproduces(model):
        model.set_attn_implementation("eager")
        return False
    if model.config._attn_implementation != ATTN_IMPLEMENTATION:
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return bool(model.config._attn_implementation == ATTN_IMPLEMENTATION)


def differs_note(model: Any) -> str:
    """The Attention pane's one line for a model :func:`reproduces` refused."""
    return (
        f"{type(model).__name__}'s attention does something LLM Lens' attention function does "
        "not reproduce (its logits differ through it), so the model runs its own attention and "
        "its maps are not recorded"
    )


def reproduces(model: Any, tolerance: float = 1e-3) -> bool:
    """Are the model's logits over a short sequence the same through :func:`lens_attention` as
    through its own eager attention? A family whose attention module does something else when
    the implementation is not named "eager" (a sparse selection it folds in only then, say)
    would otherwise compute different tokens, silently. True where eager cannot run alone."""
    import torch

    vocab = int(model.get_input_embeddings().num_embeddings)
    device = next(model.parameters()).device
    ids = ((torch.arange(8, device=device) * 7 + 3) % vocab)[None]  # (1, 8)
    logits = []
    try:
        with torch.inference_mode():
            for impl in ("eager", ATTN_IMPLEMENTATION):
                model.set_attn_implementation(impl)
                logits.append(model(input_ids=ids, use_cache=False).logits.float())
    except Exception:  # noqa: BLE001 - a family whose eager path cannot run: nothing to compare
        return True
    want, got = logits
    scale = float(want.abs().max()) or 1.0
    return float((got - want).abs().max()) <= tolerance * scale
