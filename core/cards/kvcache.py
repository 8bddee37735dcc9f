"""The KV cache card: the formula's bytes against the measured ones, and what head sharing saves."""

from __future__ import annotations

from llm_lens.core.cards.common import Explainer
from llm_lens.core.kvcache.formula import per_layer_terms
from llm_lens.core.kvcache.measure import no_cache_line
from llm_lens.core.records import ModelInfo, StepRecord


def _sharing_text(info: ModelInfo, saving: float) -> str:
    kind = info.head_sharing
    if kind == "MHA":
        return f"Multi-head attention (MHA): each of the {info.num_heads} heads caches its own K/V."
    what = "Multi-query" if kind == "MQA" else "Grouped-query"
    return f"{what} attention ({kind}) saves ×{saving:.3g} against full MHA."


def _latent_headline(info: ModelInfo, step: StepRecord) -> str:
    """The formula where every layer caches one latent a token (DeepSeek's MLA; LongCat-Flash's
    blocks one a sublayer) and none has a window; "" otherwise."""
    kv, dims = step.kv, set(info.latent_dims)
    if len(dims) != 1 or 0 in dims or any(kv.windows) or kv.state_bytes:
        return ""
    per = int(getattr(info, "sublayers", 1) or 1)
    count = (
        f"{info.num_layers} blocks × {per} sublayers" if per > 1 else f"{info.num_layers} layers"
    )
    return (
        f"Step {step.index}: {count} × {dims.pop() // per} latent × {info.dtype_bytes} bytes × "
        f"{kv.tokens} tokens = {kv.formula_bytes:,} bytes; measured {kv.bytes_total:,}."
    )


def kvcache_card(info: ModelInfo, step: StepRecord) -> Explainer:
    kv = step.kv
    if kv.no_cache:  # GPT-1: nothing to measure against a formula, and no number made up
        shows = "Each step's forward re-reads the whole sequence; the Timing pane shows it grow."
        headline = f"Step {step.index}: {no_cache_line(kv.tokens)}"
        return Explainer(headline, shows, (), (), "Compare a model that keeps one.")
    shows = (
        "The bytes the KV cache holds after each step, measured from its tensors, against "
        "the formula; the dashed line is what full multi-head attention would need."
    )
    headline = (
        f"Step {step.index}: 2 × {info.num_layers} layers × {info.num_kv_heads} KV heads × "
        f"{info.head_dim} × {info.dtype_bytes} bytes × {kv.tokens} tokens = "
        f"{kv.formula_bytes:,} bytes; measured {kv.bytes_total:,}."
    )
    terms = per_layer_terms(info, kv.tokens, kv.windows)
    latent = _latent_headline(info, step)
    if latent:
        headline = latent
    elif terms:  # layers differ in K/V heads or head size (MiMo, Inkling, Gemma 4)
        headline = (
            f"Step {step.index}: Σ layers 2 × its KV heads × its head size × "
            f"{info.dtype_bytes} bytes × tokens it holds = {terms} = "
            f"{kv.formula_bytes - kv.state_formula_bytes:,} bytes of K/V; measured "
            f"{kv.bytes_total - kv.state_bytes:,}."
        )
    saving = kv.mha_bytes / kv.bytes_total if kv.bytes_total else float("nan")
    numbers = (_sharing_text(info, saving),)
    return Explainer(headline, shows, numbers, (), "Run a longer prompt: the line stays straight.")
