"""GGUF beyond Llama: a tiny random model of another family, written as a GGUF with the ``gguf``
package, loads through ``load_model`` (the same dequantize-once cache) with the source's logits.

The writer is the inverse of transformers' GGUF reader: config fields under the reader's own
``GGUF_CONFIG_MAPPING`` names, tensors under gguf-py's own name map, the tokenizer fields built
from the first tokens of the bundled SmolLM2 tokenizer, and the few per-family tensor transforms
the reader undoes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

HIDDEN, LAYERS, VOCAB = 32, 2, 600
FAMILIES: dict[str, dict[str, Any]] = {
    "qwen2": dict(intermediate_size=64, num_attention_heads=4, num_key_value_heads=2),
    "phi3": dict(intermediate_size=64, num_attention_heads=4, num_key_value_heads=4),
    "gpt2": dict(n_embd=HIDDEN, n_layer=LAYERS, n_head=4, max_position_embeddings=1024),
    "gemma2": dict(
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=4,
        tie_word_embeddings=True,  # Gemma ties: its GGUF has no output
    ),  # fmt: skip
}


def small_vocab(tokenizer: Any, size: int = VOCAB) -> tuple[list[str], list[str]]:
    """The first ``size`` tokens of a byte-level BPE tokenizer and the merges among them.

    SmolLM2's ids start with its 17 special tokens and the 256 byte symbols, then follow its
    merges, so the first ids with their merges are a complete (small) BPE: GGUF metadata parsing
    time grows with the vocabulary (about 25 s for all 49,152 tokens here).
    """
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    kept = set(tokens)
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    merges = []
    for merge in state["model"]["merges"]:
        a, b = merge if isinstance(merge, list) else merge.split(" ", 1)
        if a in kept and b in kept and a + b in kept:
            merges.append(f"{a} {b}")
    return tokens, merges


def _tokenizer_fields(writer: Any, tokenizer: Any) -> None:
    tokens, merges = small_vocab(tokenizer)
    special = set(tokenizer.all_special_ids)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if i in special else 1 for i in range(len(tokens))])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)


def _config_fields(writer: Any, arch: str, config: Any) -> None:
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    for key, attr in GGUF_CONFIG_MAPPING[arch].items():
        value = getattr(config, attr, None) if attr else None
        if attr == "feed_forward_length" and value is None:  # gpt2: n_inner None means 4 × n_embd
            value = 4 * config.n_embd
        if isinstance(value, bool) or value is None:
            continue
        name = f"{arch}.{key}"
        if isinstance(value, int):
            writer.add_uint32(name, value)
        elif isinstance(value, float):
            writer.add_float32(name, value)


def _tensor(arch: str, gguf_name: str, data: np.ndarray) -> np.ndarray:
    """Undo what transformers' reader does to this family's tensors."""
    if arch == "gpt2" and gguf_name.endswith(
        ("attn_qkv.weight", "ffn_down.weight", "ffn_up.weight", "attn_output.weight")
    ):
        return np.ascontiguousarray(data.T)
    if arch == "gemma2" and "norm.weight" in gguf_name:  # GGUF stores Gemma's norms as 1 + w
        return data + 1
    return data


def write_gguf(model: Any, arch: str, path: Path, tokenizer: Any) -> None:
    """``model`` as an F32 GGUF of architecture ``arch``."""
    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    names = gguf.get_tensor_name_map(arch_id, model.config.num_hidden_layers)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-{arch}")
    _config_fields(writer, arch, model.config)
    _tokenizer_fields(writer, tokenizer)
    tied = model.config.tie_word_embeddings
    for hf_name, tensor in model.state_dict().items():
        if tied and hf_name == "lm_head.weight":  # as llama.cpp writes it: no output tensor
            continue
        base, _, suffix = hf_name.rpartition(".")
        gguf_name = names.get_name(base)
        if gguf_name is None and hf_name == "lm_head.weight":
            gguf_name = "output"
        assert gguf_name is not None, f"no GGUF name for {hf_name}"
        full = f"{gguf_name}.{suffix}"
        data = tensor.detach().float().numpy()
        writer.add_tensor(full, _tensor(arch, full, data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _tiny(arch: str, vocab: int) -> Any:
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    base = dict(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(0)
    config = CONFIG_MAPPING[arch](**{**base, **FAMILIES[arch]})
    return AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


TEXT = "The cat sat on the mat, and then it ran."


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_gguf_of_another_family_loads_with_the_same_logits(
    arch: str, loaded: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llm_lens.core.loading import load_model

    monkeypatch.setenv("LLM_LENS_CACHE", str(tmp_path / "cache"))
    source = _tiny(arch, VOCAB)
    path = tmp_path / f"tiny-{arch}.gguf"
    write_gguf(source, arch, path, loaded.tokenizer)
    lm = load_model(str(path), device="cpu", dtype="float32")
    assert lm.model.config.model_type == arch
    assert (lm.info.num_layers, lm.info.hidden_size, lm.info.vocab_size) == (LAYERS, HIDDEN, VOCAB)
    ids = lm.tokenizer(TEXT, return_tensors="pt").input_ids  # (1, T)
    if arch != "gemma2":  # transformers reads a Gemma GGUF's vocabulary as SentencePiece
        assert lm.tokenizer.decode(ids[0]) == TEXT and ids.shape[1] > 5  # merges, not bytes
    ids = ids[:, :8] % VOCAB
    with torch.no_grad():
        expected = source(ids).logits
        got = lm.model(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    converted = list((tmp_path / "cache" / "models").iterdir())
    assert len(converted) == 1 and (converted[0] / "model.safetensors").is_file()
    again = load_model(str(path), device="cpu", dtype="float32")  # from the cache, no convert
    assert list((tmp_path / "cache" / "models").iterdir()) == converted
    with torch.no_grad():
        torch.testing.assert_close(again.model(ids).logits, expected, rtol=1e-5, atol=1e-5)
