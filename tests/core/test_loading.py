"""Loading (``core/loading.py``): every failure surfaces as a :class:`ModelLoadError` naming what
the user asked for; the GGUF conversion is run once, into a temporary cache, and checked against
transformers' own GGUF loader.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from llm_lens.core.errors import ModelLoadError
from llm_lens.core.loading import bundled_gguf, folder_identity, gguf_to_folder, load_model
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY


def _load_error(spec: str, **kw) -> str:
    with pytest.raises(ModelLoadError) as info:
        load_model(spec, **kw)
    message = str(info.value)
    assert spec in message
    return message


def test_missing_path(tmp_path):
    assert "no such file or folder" in _load_error(str(tmp_path / "nope"))
    assert "no such file" in _load_error("./no/such/model.gguf")


def test_empty_and_readme_only_folders(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "holds no model" in _load_error(str(empty))
    readme = tmp_path / "readme"
    readme.mkdir()
    (readme / "README.md").write_text("# a model card without a model\n")
    assert "holds no model" in _load_error(str(readme))


def test_truncated_gguf(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("LLM_LENS_CACHE", str(cache))
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(np.random.default_rng(0).bytes(1000))
    assert "not a readable GGUF" in _load_error(str(gguf))
    leftovers = list((cache / "models").iterdir()) if (cache / "models").exists() else []
    assert leftovers == []  # neither a half-converted target nor the temporary folder


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory, tiny, loaded):
    folder = tmp_path_factory.mktemp("tiny-hf")
    tiny.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    return folder


def test_corrupt_safetensors(tmp_path, tiny_folder):
    folder = tmp_path / "corrupt"
    folder.mkdir()
    for f in tiny_folder.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    json.loads((folder / "config.json").read_text())  # the config itself is valid
    line = _load_error(str(folder))  # its header, checked against the file, names the tensor
    assert "model.safetensors is not a valid safetensors file: tensor" in line
    assert "the data has" in line


def test_garbled_config(tmp_path):
    (tmp_path / "config.json").write_text("{ not json")
    _load_error(str(tmp_path))


def test_bert_is_not_a_causal_lm(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    BertForMaskedLM(config).save_pretrained(tmp_path)
    assert "not a causal" in _load_error(str(tmp_path))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_on_a_cpu_machine(tiny_folder):
    with pytest.raises(ModelLoadError, match="no CUDA"):
        load_model(str(tiny_folder), device="cuda")
    with pytest.raises(ModelLoadError, match="'cuda:1'"):
        load_model(str(tiny_folder), device="cuda:1")


def test_bogus_dtype_and_device(tiny_folder):
    with pytest.raises(ModelLoadError, match="unknown dtype 'float8'"):
        load_model(str(tiny_folder), dtype="float8")
    with pytest.raises(ModelLoadError, match="unknown device 'tpu'"):
        load_model(str(tiny_folder), device="tpu")


def test_local_hf_folder_loads_and_generates(tiny, tiny_folder):
    lm = load_model(str(tiny_folder))
    assert lm.info.source == str(tiny_folder) and lm.info.num_layers == 2
    assert lm.info.weights_id == folder_identity(tiny_folder) != "unknown"
    assert lm.model.config._attn_implementation == "eager"
    assert lm.model.use_kernels is False  # the model's own modules, no kernels from the Hub
    ids = torch.tensor([[1, 9690, 198, 2683, 359]])
    with torch.inference_mode():
        assert torch.equal(lm.model(ids).logits, tiny.model(ids).logits)
    eng = Engine(lm)
    run = eng.start(eng.tokenize("hello", chat=False), GREEDY, RunConfig(max_new_tokens=3))
    run.run_all()
    assert len(run.generated_ids) == 3 and run.finish_reason == "length"
    ref = Engine(tiny).start(eng.tokenize("hello", chat=False), GREEDY, RunConfig(3))
    assert ref.run_all() and [s.token.id for s in ref.steps] == run.generated_ids


def test_cached_hub_id_loads(tmp_path, monkeypatch, tiny, loaded):
    """An ``org/name`` hub id already in the Hugging Face cache loads offline.

    Fails today: core/loading.py treats every spec containing ``os.sep`` as a path, and on
    POSIX ``os.sep`` is "/", so every hub id is refused as "no such file or folder".
    """
    import huggingface_hub.constants as hub

    repo = tmp_path / "models--llm-lens-test--tiny-llama"
    snapshot = repo / "snapshots" / ("0" * 40)
    tiny.model.save_pretrained(snapshot)
    loaded.tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load_model("llm-lens-test/tiny-llama")
    assert lm.info.num_layers == 2 and lm.info.weights_id == "hub:llm-lens-test/tiny-llama"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    cache = tmp_path_factory.mktemp("lens-cache")
    calls: list[tuple[float, str]] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLM_LENS_CACHE", str(cache))
        folder = gguf_to_folder(bundled_gguf(), lambda f, m: calls.append((f, m)))
        again: list[tuple[float, str]] = []
        assert gguf_to_folder(bundled_gguf(), lambda f, m: again.append((f, m))) == folder
    assert again == []  # the second use finds the copy and converts nothing
    yield folder, cache, calls
    shutil.rmtree(cache, ignore_errors=True)  # half a gigabyte of float32 weights


def test_conversion_detaches_the_quantizer(converted, loaded):
    folder, cache, calls = converted
    assert folder.parent == cache / "models"
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (folder / "model.safetensors").stat().st_size > 4 * 130_000_000  # float32
    source = json.loads((folder / "llm-lens-source.json").read_text())
    assert source == {"gguf": str(bundled_gguf())}
    fractions = [f for f, _ in calls]
    assert fractions == sorted(fractions) and 0 < fractions[0] and fractions[-1] <= 1
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".convert-")]
    # the session model was converted by the same code into the user cache
    session_config = json.loads((Path(loaded.model.name_or_path) / "config.json").read_text())
    assert "quantization_config" not in session_config
    assert loaded.model.use_kernels is False


def test_converted_logits_equal_transformers_gguf_loader(converted, loaded):
    from transformers import AutoModelForCausalLM

    folder, _cache, _calls = converted
    gguf = bundled_gguf()
    direct = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    mine = load_model(str(folder))
    loaded.model.set_attn_implementation("eager")
    ids = torch.tensor([loaded.tokenizer("The capital of France is")["input_ids"]])
    with torch.inference_mode():
        want = direct(ids).logits
        got = mine.model(ids).logits
        session = loaded.model(ids).logits
    assert torch.equal(got, want), float((got - want).abs().max())
    assert torch.equal(session, want)
    assert mine.info.num_parameters == loaded.info.num_parameters == direct.num_parameters()
    assert os.path.samefile(mine.model.name_or_path, folder)
