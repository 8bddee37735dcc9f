"""Tiny random models of every family the Engine supports, built from a config (fast tests).

Each shares the bundled tokenizer (so prompts, chat templates and texts are real), has 2-4
layers, a 32-64 wide residual, GQA where the family allows it, eager attention and a fixed seed.
:func:`family_model` builds each once per test session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

WINDOW = 5  # sliding windows shorter than the test prompts
COMMON: dict[str, Any] = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    tie_word_embeddings=False,
)
LLAMA3_ROPE = dict(
    rope_type="llama3",
    rope_theta=500000.0,
    factor=8.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=32,
)
# name -> (model_type, config overrides); None drops a COMMON key the family does not have
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt2": ("gpt2", dict(n_inner=64, num_key_value_heads=None, intermediate_size=None)),
    "gpt_neox": ("gpt_neox", dict(num_key_value_heads=None, rotary_pct=0.5)),
    "opt": ("opt", dict(ffn_dim=64, num_key_value_heads=None, intermediate_size=None)),
    "falcon_new": (
        "falcon",
        dict(new_decoder_architecture=True, num_kv_heads=2, num_key_value_heads=None),
    ),
    "falcon_mq": ("falcon", dict(multi_query=True, num_key_value_heads=None)),
    "phi3": ("phi3", dict(num_hidden_layers=3)),
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", dict(head_dim=8)),
    "gemma2": ("gemma2", dict(sliding_window=WINDOW, head_dim=8, num_hidden_layers=4)),
    "gemma3": (
        "gemma3_text",
        dict(sliding_window=WINDOW, head_dim=8, num_hidden_layers=4, sliding_window_pattern=3),
    ),
    "mistral": ("mistral", dict(sliding_window=WINDOW)),
    "mixtral": ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2)),
    "olmo2": ("olmo2", {}),
    "stablelm": ("stablelm", dict(partial_rotary_factor=0.25)),
    "granite": (
        "granite",
        dict(
            embedding_multiplier=12.0,
            logits_scaling=8.0,
            residual_multiplier=0.22,
            attention_multiplier=0.015625,
        ),
    ),
    "llama3": ("llama", dict(hidden_size=64, rope_parameters=LLAMA3_ROPE)),
}
WINDOWED = ("gemma2", "gemma3", "mistral")
_cache: dict[str, Any] = {}


def family_config(name: str, vocab_size: int) -> Any:
    from transformers import CONFIG_MAPPING

    model_type, overrides = FAMILIES[name]
    cfg = {**COMMON, **overrides, "vocab_size": vocab_size}
    return CONFIG_MAPPING[model_type](**{k: v for k, v in cfg.items() if v is not None})


def family_model(name: str, tokenizer: Any) -> Any:
    """``LoadedModel`` of the family ``name`` with ``tokenizer``'s vocabulary, built once."""
    return seeded_model(_cache, name, family_config, tokenizer)


def seeded_model(
    cache: dict[str, Any], name: str, config_of: Callable[[str, int], Any], tokenizer: Any
) -> Any:
    """``LoadedModel`` of ``config_of(name, vocabulary size)``, its weights drawn with seed 0
    and eager attention, with ``tokenizer``; built once per ``name`` in ``cache``."""
    if name not in cache:
        import torch
        from transformers import AutoModelForCausalLM

        from llm_lens.core.loading import LoadedModel, describe

        config = config_of(name, len(tokenizer))
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
        cache[name] = LoadedModel(model, tokenizer, describe(model, name, "test", "tiny"))
    return cache[name]


def assert_greedy_equals_generate(engine: Any, run: Any) -> None:
    """A greedy run's tokens equal the model's own ``generate()`` from the same prompt, and each
    step's logits its logits (to 1e-4 of their largest magnitude)."""
    import numpy as np
    import torch

    prompt = torch.tensor([run.prompt.ids])
    with torch.inference_mode():
        ref = engine.model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=len(run.steps),
            do_sample=False, output_logits=True, return_dict_in_generate=True,
        )  # fmt: skip
    assert run.generated_ids == ref.sequences[0, len(run.prompt) :].tolist()
    for step, want in zip(run.steps, ref.logits, strict=True):
        want = want[0].float().numpy()
        np.testing.assert_allclose(step.logits, want, atol=1e-4 * np.abs(want).max())
