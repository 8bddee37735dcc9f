"""KV-cache sizing from config.json: each family's field spellings, bad inputs, the CLI, and a
check against the bytes transformers' own DynamicCache holds for tiny random models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_lens.core.cli.kv import main as main_kv
from llm_lens.core.kvcache import (
    ConfigError,
    KVLayout,
    dtype_bytes,
    format_report,
    kv_report,
    layout_from_config,
    load_config,
)

# Trimmed copies of the public config.json files (the fields that matter, plus some that don't).
LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
MISTRAL_7B = {
    "model_type": "mistral",
    "hidden_size": 4096,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "torch_dtype": "bfloat16",
}
QWEN2_7B = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "max_position_embeddings": 131072,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "torch_dtype": "bfloat16",
}
GEMMA_2B = {
    "model_type": "gemma",
    "head_dim": 256,
    "hidden_size": 2048,
    "max_position_embeddings": 8192,
    "num_attention_heads": 8,
    "num_hidden_layers": 18,
    "num_key_value_heads": 1,
    "torch_dtype": "bfloat16",
}
GEMMA_7B = {  # head_dim 256 although hidden_size // heads is 192
    "model_type": "gemma",
    "head_dim": 256,
    "hidden_size": 3072,
    "max_position_embeddings": 8192,
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 16,
    "torch_dtype": "bfloat16",
}
GPT2 = {
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
}
FALCON_7B = {
    "model_type": "falcon",
    "hidden_size": 4544,
    "multi_query": True,
    "new_decoder_architecture": False,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "parallel_attn": True,
    "torch_dtype": "bfloat16",
}
FALCON_40B = {
    "model_type": "falcon",
    "hidden_size": 8192,
    "new_decoder_architecture": True,
    "num_attention_heads": 128,
    "num_hidden_layers": 60,
    "num_kv_heads": 8,
    "parallel_attn": True,
    "torch_dtype": "bfloat16",
}
PHI_2 = {
    "model_type": "phi",
    "hidden_size": 2560,
    "max_position_embeddings": 2048,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": None,
    "partial_rotary_factor": 0.4,
    "torch_dtype": "float16",
}
PHI_3_MINI = {
    "model_type": "phi3",
    "hidden_size": 3072,
    "max_position_embeddings": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "torch_dtype": "bfloat16",
}
SMOLLM2_135M = {
    "model_type": "llama",
    "head_dim": 64,
    "hidden_size": 576,
    "max_position_embeddings": 8192,
    "num_attention_heads": 9,
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "torch_dtype": "bfloat16",
}
GEMMA3_4B = {  # multimodal: the language model sits under text_config, dtype at the top
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "head_dim": 256,
        "hidden_size": 2560,
        "max_position_embeddings": 131072,
        "num_attention_heads": 8,
        "num_hidden_layers": 34,
        "num_key_value_heads": 4,
    },
    "vision_config": {"model_type": "siglip_vision_model", "num_hidden_layers": 27},
    "torch_dtype": "bfloat16",
}

# name, config, (family, layers, heads, kv_heads, head_dim, context), bf16 bytes/token, MHA bytes
FAMILIES = [
    ("llama3-8b", LLAMA3_8B, ("llama", 32, 32, 8, 128, 8192), 131072, 524288),
    ("mistral-7b", MISTRAL_7B, ("mistral", 32, 32, 8, 128, 32768), 131072, 524288),
    ("qwen2-7b", QWEN2_7B, ("qwen2", 28, 28, 4, 128, 131072), 57344, 401408),
    ("gemma-2b", GEMMA_2B, ("gemma", 18, 8, 1, 256, 8192), 18432, 147456),
    ("gemma-7b", GEMMA_7B, ("gemma", 28, 16, 16, 256, 8192), 458752, 458752),
    ("gpt2", GPT2, ("gpt2", 12, 12, 12, 64, 1024), 36864, 36864),
    ("falcon-7b", FALCON_7B, ("falcon", 32, 71, 1, 64, None), 8192, 581632),
    ("falcon-40b", FALCON_40B, ("falcon", 60, 128, 8, 64, None), 122880, 1966080),
    ("phi-2", PHI_2, ("phi", 32, 32, 32, 80, 2048), 327680, 327680),
    ("phi-3-mini", PHI_3_MINI, ("phi3", 32, 32, 32, 96, 4096), 393216, 393216),
    ("smollm2-135m", SMOLLM2_135M, ("llama", 30, 9, 3, 64, 8192), 23040, 69120),
    ("gemma3-4b", GEMMA3_4B, ("gemma3_text", 34, 8, 4, 256, 131072), 139264, 278528),
]


@pytest.mark.parametrize(
    ("cfg", "shape", "per_token", "mha"),
    [f[1:] for f in FAMILIES],
    ids=[f[0] for f in FAMILIES],
)
def test_layout_of_each_family(
    cfg: dict[str, Any], shape: tuple[Any, ...], per_token: int, mha: int
) -> None:
    layout = layout_from_config(cfg)
    got = (
        layout.family,
        layout.num_layers,
        layout.num_heads,
        layout.num_kv_heads,
        layout.head_dim,
        layout.context_length,
    )
    assert got == shape
    assert layout.bytes_per_token(2) == per_token
    assert layout.mha_bytes_per_token(2) == mha


def test_smollm2_float32_numbers() -> None:
    layout = layout_from_config(SMOLLM2_135M)
    assert layout.bytes_per_token(4) == 2 * 30 * 3 * 64 * 4 == 46080
    assert layout.mha_bytes_per_token(4) == 138240
    assert layout.total_bytes(4096, 4) == 46080 * 4096
    assert layout.total_bytes(100, 4, batch=3) == 46080 * 100 * 3
    assert layout.bytes_per_token(4, batch=2) == 92160


def test_head_dim_null_falls_back_to_hidden_over_heads() -> None:
    cfg = dict(LLAMA3_8B, head_dim=None)
    assert layout_from_config(cfg).head_dim == 128


def test_missing_kv_heads_means_mha() -> None:
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "num_key_value_heads"}
    assert layout_from_config(cfg).num_kv_heads == 32


@pytest.mark.parametrize(
    ("overrides", "kv_heads"),
    [
        ({"multi_query": False}, 71),  # plain MHA Falcon (falcon-rw)
        ({"multi_query": None}, 1),  # FalconConfig's default is multi_query=True
        ({"new_decoder_architecture": True, "num_kv_heads": None}, 71),  # FalconConfig default
        ({"model_type": "RefinedWeb", "new_decoder_architecture": None, "n_head_kv": 71}, 71),
    ],
)
def test_falcon_variants(overrides: dict[str, Any], kv_heads: int) -> None:
    cfg = {k: v for k, v in dict(FALCON_7B, **overrides).items() if v is not None}
    layout = layout_from_config(cfg)
    assert (layout.family, layout.num_kv_heads, layout.head_dim) == ("falcon", kv_heads, 64)


def test_gpt_bigcode_multi_query_is_one_kv_head() -> None:
    cfg = dict(GPT2, model_type="gpt_bigcode", multi_query=True)
    assert layout_from_config(cfg).num_kv_heads == 1


@pytest.mark.parametrize(
    ("drop", "named"),
    [
        ("num_hidden_layers", "num_hidden_layers/n_layer/num_layers"),
        ("num_attention_heads", "num_attention_heads/n_head/num_heads"),
        ("hidden_size", "hidden_size/n_embd"),
    ],
)
def test_missing_field_is_named(drop: str, named: str) -> None:
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != drop}
    with pytest.raises(ConfigError, match=named):
        layout_from_config(cfg)


def test_missing_field_in_text_config_says_so() -> None:
    cfg = {"model_type": "llava", "text_config": {"model_type": "llama", "vocab_size": 32064}}
    with pytest.raises(ConfigError, match="text_config has no num_hidden_layers"):
        layout_from_config(cfg)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_key_value_heads": 5}, "does not divide"),
        ({"num_hidden_layers": "32"}, "num_hidden_layers must be a positive integer"),
        ({"num_attention_heads": 0}, "num_attention_heads must be a positive integer"),
        ({"head_dim": None, "hidden_size": 4100}, "not divisible"),
        ({"is_encoder_decoder": True}, "encoder-decoder"),
    ],
)
def test_bad_values_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        layout_from_config(dict(LLAMA3_8B, **overrides))


def test_layout_methods_refuse_nonpositive_inputs() -> None:
    layout = KVLayout("llama", 2, 4, 2, 8, None)
    with pytest.raises(ConfigError, match="tokens"):
        layout.total_bytes(0, 2)
    with pytest.raises(ConfigError, match="batch"):
        layout.bytes_per_token(2, batch=-1)
    with pytest.raises(ConfigError, match="num_kv_heads"):
        KVLayout("llama", 2, 4, 0, 8, None)


DTYPES = [("float32", 4), ("fp32", 4), ("f32", 4), ("float16", 2), ("fp16", 2), ("bfloat16", 2)]
DTYPES += [("BF16", 2), ("torch.bfloat16", 2), ("float8", 1), ("fp8", 1), ("int8", 1)]


@pytest.mark.parametrize(("name", "size"), DTYPES)
def test_dtype_bytes(name: str, size: int) -> None:
    assert dtype_bytes(name) == size


def test_unknown_dtype_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="'int4'.*float32.*bfloat16.*int8"):
        dtype_bytes("int4")


def _write(path: Path, cfg: dict[str, Any]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return path


def test_load_config_from_folder_and_file(tmp_path: Path) -> None:
    folder = _write(tmp_path / "smol", SMOLLM2_135M)
    assert load_config(str(folder)) == SMOLLM2_135M
    assert load_config(str(folder / "config.json")) == SMOLLM2_135M


def test_load_config_bad_local_inputs(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=f"{missing} does not exist"):
        load_config(str(missing))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="empty has no config.json"):
        load_config(str(tmp_path / "empty"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="bad.json is not valid JSON"):
        load_config(str(bad))
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError, match="not an object"):
        load_config(str(listed))


def test_load_config_from_hub_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    cached = _write(tmp_path / "cache", GPT2) / "config.json"
    calls: list[tuple[str, str]] = []

    def fake_download(repo_id: str, filename: str) -> str:
        calls.append((repo_id, filename))
        if repo_id != "openai-community/gpt2":
            raise OSError("offline and not in the cache")
        return str(cached)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    assert load_config("openai-community/gpt2") == GPT2
    assert calls == [("openai-community/gpt2", "config.json")]
    with pytest.raises(ConfigError, match="someone/missing-model.*OSError: offline"):
        load_config("someone/missing-model")


def test_kv_report_dtype_sources(tmp_path: Path) -> None:
    smol = str(_write(tmp_path / "smol", SMOLLM2_135M))
    gpt2 = str(_write(tmp_path / "gpt2", GPT2))
    new_style = str(_write(tmp_path / "new", dict(GPT2, dtype="float32")))
    assert kv_report(smol, 10, 1, None)["dtype"] == "bfloat16"  # from torch_dtype
    assert kv_report(gpt2, 10, 1, None)["dtype"] == "float16"  # config says nothing
    assert kv_report(new_style, 10, 1, None)["dtype"] == "float32"  # transformers 5 "dtype"
    assert kv_report(smol, 10, 1, "fp32")["dtype"] == "float32"


def test_kv_report_numbers(tmp_path: Path) -> None:
    spec = str(_write(tmp_path / "smol", SMOLLM2_135M))
    report = kv_report(spec, 4096, 2, "float32")
    assert report == {
        "model": spec,
        "family": "llama",
        "num_layers": 30,
        "num_heads": 9,
        "num_kv_heads": 3,
        "head_dim": 64,
        "dtype": "float32",
        "tokens": 4096,
        "batch": 2,
        "bytes_per_token": 92160,
        "total_bytes": 92160 * 4096,
        "mha_bytes_per_token": 276480,
        "mha_total_bytes": 276480 * 4096,
        "gqa_ratio": 3,
        "layer_windows": [0] * 30,
        "sliding_layers": 0,
        "sliding_windows": [],
        "held_tokens": [4096] * 30,
    }
    with pytest.raises(ConfigError, match="tokens"):
        kv_report(spec, 0, 1, None)


def test_format_report_writes_out_the_formula(tmp_path: Path) -> None:
    spec = str(_write(tmp_path / "smol", SMOLLM2_135M))
    text = format_report(kv_report(spec, 4096, 1, "float32"))
    assert "2 × layers × kv_heads × head_dim × bytes × tokens" in text
    assert f"2 × 30 × 3 × 64 × 4 × 4096 = {46080 * 4096} bytes" in text
    assert "180.00 MiB" in text  # 188743680 bytes
    assert "45.00 KiB (46080 bytes)" in text
    assert "540.00 MiB (566231040 bytes)" in text  # the MHA comparison
    batched = format_report(kv_report(spec, 4096, 2, "float32"))
    assert "tokens × batch" in batched and "× 4096 × 2 =" in batched


def test_main_kv_json_matches_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(_write(tmp_path / "smol", SMOLLM2_135M))
    argv = ["--config", spec, "--tokens", "100", "--batch", "2", "--dtype", "fp32", "--json"]
    assert main_kv(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == kv_report(spec, 100, 2, "fp32")
    assert out["total_bytes"] == 46080 * 2 * 100


def test_main_kv_default_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    smol = str(_write(tmp_path / "smol", SMOLLM2_135M))
    falcon = str(_write(tmp_path / "falcon", FALCON_7B))  # no context length in its config
    assert main_kv(["--config", smol, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == 8192
    assert main_kv(["--config", falcon, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == 4096
    assert main_kv(["--config", smol]) == 0
    assert "2 × 30 × 3 × 64 × 2 × 8192" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--tokens", "0"], "argument --tokens: must be a positive integer, got '0'"),
        (["--tokens", "-5"], "--tokens"),
        (["--batch", "0"], "--batch"),
        (["--dtype", "int4"], "unknown dtype 'int4'"),
    ],
)
def test_main_kv_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    spec = str(_write(tmp_path / "smol", SMOLLM2_135M))
    assert main_kv(["--config", spec, *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("llm-lens kv: error: ")
    assert named in captured.err and captured.err.count("\n") == 1


def test_main_kv_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope" / "config.json")
    assert main_kv(["--config", missing]) == 2
    assert capsys.readouterr().err == f"llm-lens kv: error: config path {missing} does not exist\n"
    broken = _write(tmp_path / "broken", {"model_type": "llama", "num_attention_heads": 4})
    assert main_kv(["--config", str(broken)]) == 2
    assert "no num_hidden_layers/n_layer/num_layers" in capsys.readouterr().err
    assert main_kv([]) == 2
    assert "--config" in capsys.readouterr().err


TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}


@pytest.mark.parametrize(
    "cfg",
    [
        dict(TINY, model_type="llama", num_key_value_heads=2),
        dict(TINY, model_type="gemma", num_key_value_heads=1, head_dim=24),
        dict(TINY, model_type="falcon", multi_query=True, alibi=False),
        {"model_type": "gpt2", "vocab_size": 64, "n_embd": 32, "n_head": 4, "n_layer": 2},
    ],
    ids=["llama-gqa", "gemma-head-dim", "falcon-mqa", "gpt2-mha"],
)
def test_matches_transformers_dynamic_cache(cfg: dict[str, Any]) -> None:
    """The bytes a real (tiny, random) model's cache holds agree with the config arithmetic."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**cfg)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    tokens, batch = 7, 3
    with torch.inference_mode():
        out = model(torch.zeros(batch, tokens, dtype=torch.long), use_cache=True)
    cached = sum(
        t.numel() * t.element_size()
        for layer in out.cache.layers
        for t in (layer.keys, layer.values)
    )
    layout = layout_from_config(cfg)
    assert cached == layout.total_bytes(tokens, dtype_bytes("float32"), batch)


# name, config, per-layer windows transformers' DynamicCache builds for it
WINDOWED = [
    ("mistral-7b", MISTRAL_7B, (4096,) * 32),
    ("qwen2-7b", QWEN2_7B, (0,) * 28),  # sliding_window 131072 but use_sliding_window false
    ("gemma3-4b", GEMMA3_4B, tuple(0 if (i + 1) % 6 == 0 else 4096 for i in range(34))),
    ("llama3-8b", LLAMA3_8B, (0,) * 32),
]


@pytest.mark.parametrize(
    ("cfg", "windows"), [w[1:] for w in WINDOWED], ids=[w[0] for w in WINDOWED]
)
def test_layer_windows_of_real_configs(cfg: dict[str, Any], windows: tuple[int, ...]) -> None:
    layout = layout_from_config(cfg)
    assert layout.windows == windows
    held = layout.held_tokens(10_000)
    assert held == tuple(10_000 if w == 0 else w - 1 for w in windows)


def test_mistral_report_at_n_tokens_counts_the_window(tmp_path: Path) -> None:
    """Mistral 7B at 8,192 tokens holds 4,095 per layer: half what a full cache would."""
    spec = str(_write(tmp_path / "mistral", MISTRAL_7B))
    report = kv_report(spec, 8192, 1, None)
    assert report["sliding_layers"] == 32 and report["sliding_windows"] == [4096]
    assert report["total_bytes"] == 131072 * 4095
    assert report["mha_total_bytes"] == 524288 * 4095
    below = kv_report(spec, 1000, 1, None)
    assert below["total_bytes"] == 131072 * 1000  # inside the window every token is held
    text = format_report(report)
    assert "32 layers with a 4096-token window hold min(tokens, 4095) = 4095" in text
    assert f"2 × 8 × 128 × 2 × (32 × 4095) = {131072 * 4095} bytes" in text
