"""Shared fixtures: the real bundled model (loaded once), a tiny random Llama, offscreen Qt."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import pytest  # noqa: E402

from llm_lens.core.runtime import configure_threads  # noqa: E402  # noqa: E402

configure_threads()


@pytest.fixture(scope="session")
def loaded():
    """The bundled SmolLM2-135M-Instruct (converted once into the user cache)."""
    from llm_lens.core.loading import load_model

    return load_model()


@pytest.fixture(scope="session")
def tokenizer():
    """The bundled model's tokenizer alone (from the converted folder in the user cache), for
    tiny random models that share its vocabulary without loading its weights."""
    from transformers import AutoTokenizer

    from llm_lens.core.loading import bundled_gguf, gguf_to_folder

    return AutoTokenizer.from_pretrained(gguf_to_folder(bundled_gguf(), lambda *_: None))


@pytest.fixture(scope="session")
def engine(loaded):
    from llm_lens.core.loop.engine import Engine

    return Engine(loaded)


@pytest.fixture(scope="session")
def greedy_run(engine):
    """A finished greedy chat run of 8 tokens on the article's prompt."""
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY

    prompt = engine.tokenize("Explain transformers like I am 12")
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=8))
    run.run_all()
    return run


def make_tiny(loaded_tokenizer, **overrides):
    """A randomly initialised 2-layer Llama sharing the bundled tokenizer (fast tests)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from llm_lens.core.loading import LoadedModel, describe

    cfg = dict(
        vocab_size=len(loaded_tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=2,
        bos_token_id=1,
        tie_word_embeddings=True,
    )
    cfg.update(overrides)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**cfg, attn_implementation="eager")).eval()
    return LoadedModel(model, loaded_tokenizer, describe(model, "tiny-llama", "test", "tiny"))


@pytest.fixture(scope="session")
def tiny(loaded):
    return make_tiny(loaded.tokenizer)


@pytest.fixture(scope="session")
def tiny_engine(tiny):
    from llm_lens.core.loop.engine import Engine

    return Engine(tiny)
