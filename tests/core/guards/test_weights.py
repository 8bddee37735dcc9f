"""core/guards/weights.py: weights_id is a hash of the bytes (two files of one size differ, a
copy under another name does not), remembered per file; the loading report refuses weights
that do not fit the config, by name and shape, unless partly random is allowed."""

from __future__ import annotations

import os

import pytest

from llm_lens.core.errors import ModelLoadError
from llm_lens.core.guards import weights as w


def _pair(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    a.write_bytes(b"\x00" * 4096 + b"A" + b"\x00" * 4096)  # same size, same first and last bytes
    b.write_bytes(b"\x00" * 4096 + b"B" + b"\x00" * 4096)
    return a, b


def test_same_size_different_bytes_differ(tmp_path):
    a, b = _pair(tmp_path)
    assert a.stat().st_size == b.stat().st_size
    assert w.weights_id([a]) != w.weights_id([b])
    copy = tmp_path / "renamed.bin"
    copy.write_bytes(a.read_bytes())
    assert w.weights_id([copy]) == w.weights_id([a])  # the bytes, not the name
    assert w.weights_id([a, b]) != w.weights_id([b, a]) != w.weights_id([a])
    assert w.weights_id([]) == "unknown"


def test_digests_are_remembered_and_renewed(tmp_path, monkeypatch):
    a, _b = _pair(tmp_path)
    cache = tmp_path / "cache"
    first = w.file_digest(a, cache)
    assert (cache / "weights-digests.json").is_file()
    w._memo.clear()
    reads = []
    real_open = type(a).open
    monkeypatch.setattr(
        type(a), "open", lambda self, *x, **k: reads.append(self) or real_open(self, *x, **k)
    )
    assert w.file_digest(a, cache) == first and a not in reads  # from the cache file, unread
    a.write_bytes(b"\x01" * 8193)  # changed in place: size, mtime differ
    os.utime(a, ns=(1, 1))
    reads.clear()
    assert w.file_digest(a, cache) != first and reads.count(a) == 1


def test_a_mismatched_weight_is_named_with_both_shapes():
    info = {"mismatched_keys": [("model.embed_tokens.weight", (49152, 576), (50000, 576))]}
    with pytest.raises(ModelLoadError) as caught:
        w.check_loading_info(info, "M", allow_partly_random=False)
    assert str(caught.value) == (
        "M: weight model.embed_tokens.weight is [49152, 576] in the file; "
        "the config implies [50000, 576]"
    )


def test_missing_and_unexpected_refused_or_marked():
    info = {"missing_keys": {f"model.layers.{i}.mlp.up_proj.weight" for i in range(5)},
            "unexpected_keys": {"model.extra.weight"}, "mismatched_keys": []}  # fmt: skip
    with pytest.raises(ModelLoadError) as caught:
        w.check_loading_info(info, "M", allow_partly_random=False)
    line = str(caught.value)
    assert "5 weights missing from the files (model.layers.0.mlp.up_proj.weight" in line
    assert "and 2 more" in line and "1 unexpected weights ignored (model.extra.weight)" in line
    assert "--allow-partly-random" in line and "\n" not in line
    marked = w.check_loading_info(info, "M", allow_partly_random=True)
    assert marked.startswith("partly random: 5 weights missing")
    assert w.check_loading_info({"missing_keys": set()}, "M", False) == ""


def test_two_models_of_one_size_have_different_ids(tokenizer, tmp_path):
    """Two tiny models whose weight files have the same size load with different weights_id,
    so a session recorded with one is not 'the same model' for the other (the window's
    model_matches compares exactly this)."""
    from llm_lens.core.loading import load_model
    from tests.conftest import make_tiny

    ids = []
    for seed in (0, 1):
        loaded = make_tiny(tokenizer, hidden_size=16, intermediate_size=32, num_attention_heads=2,
                           num_key_value_heads=1)  # fmt: skip
        import torch

        with torch.no_grad():
            loaded.model.model.norm.weight.fill_(1.0 + seed)
        folder = tmp_path / f"m{seed}"
        loaded.model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        ids.append(load_model(str(folder)).info.weights_id)
    sizes = {(tmp_path / f"m{s}" / "model.safetensors").stat().st_size for s in (0, 1)}
    assert len(sizes) == 1 and ids[0] != ids[1]
