"""Where the pieces live (``core/anatomy.py``), checked against transformers' own forward: the
layers found are the ones whose outputs are the model's hidden states, the final norm and head
turn the last of them into the model's logits, each attention module sits in its own layer."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.errors import ModelLoadError
from tests.families import family_model

IDS = torch.tensor([[5, 17, 300, 42, 9, 61]])
POSITION_TABLES = {"gpt2", "opt"}  # learned position tables; the rest rotate


def layer_outputs(anatomy: Anatomy, model: Any) -> list[Any]:
    """Each found layer's output, recorded during the model's own forward."""
    outs: list[Any] = []

    def keep(_m: Any, _i: Any, out: Any) -> None:
        outs.append(out[0] if isinstance(out, tuple) else out)

    hooks = [layer.register_forward_hook(keep) for layer in anatomy.layers]
    try:
        with torch.inference_mode():
            model(IDS, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return outs


@pytest.mark.parametrize("name", ["llama3", "gpt2", "opt", "gpt_neox", "phi3", "gemma2"])
def test_the_pieces_found_are_the_ones_transformers_runs(name, tokenizer):
    model = family_model(name, tokenizer).model
    anatomy = Anatomy.of(model)
    with torch.inference_mode():
        ref = model(IDS, use_cache=False, output_hidden_states=True)
    n = model.config.num_hidden_layers
    assert len(anatomy.layers) == len(anatomy.attn) == n == len(ref.hidden_states) - 1
    outs = layer_outputs(anatomy, model)
    for i in range(n - 1):  # transformers' hidden state i + 1 is layer i's output
        torch.testing.assert_close(outs[i], ref.hidden_states[i + 1], rtol=0, atol=0)
    with torch.inference_mode():  # its last is after the final norm; the head makes the logits
        normed = anatomy.final_norm(outs[-1])
        torch.testing.assert_close(normed, ref.hidden_states[-1], rtol=1e-5, atol=1e-5)
        logits = anatomy.lm_head(ref.hidden_states[-1])
    if name != "gemma2":  # Gemma 2 soft-caps its logits after the head
        torch.testing.assert_close(logits, ref.logits, rtol=1e-5, atol=1e-5)
    for i, (layer, attn) in enumerate(zip(anatomy.layers, anatomy.attn, strict=True)):
        assert any(m is attn for m in layer.modules()) and anatomy.layer_of[id(attn)] == i
    assert anatomy.embed is model.get_input_embeddings()
    assert (anatomy.position_table is not None) == (name in POSITION_TABLES)
    assert (anatomy.rotary is None) == (name in POSITION_TABLES)


def test_what_cannot_be_found_is_one_clear_error():
    config = LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    model = LlamaForCausalLM(config)
    assert len(Anatomy.of(model).layers) == 2  # control: the intact model is found
    model.config.num_hidden_layers = 3  # no list of three blocks anywhere
    with pytest.raises(ModelLoadError, match="LlamaForCausalLM: cannot find the decoder layers"):
        Anatomy.of(model)
    model.config.num_hidden_layers = 2
    del model.model.layers[1].self_attn
    with pytest.raises(ModelLoadError, match="cannot find the attention module of layer 1"):
        Anatomy.of(model)
    with pytest.raises(ModelLoadError, match="Linear: cannot find the decoder stack"):
        Anatomy.of(torch.nn.Linear(2, 2))
