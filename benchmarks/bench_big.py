"""The largest model that opens with every pane on a 16 GiB budget, measured (not estimated).

A real config's shape (written here from its published ``config.json``; nothing is fetched)
with seeded random bfloat16 weights is written to disk shard by shard, never whole in memory:
the model is built on ``meta`` for its tensor names and shapes, each tensor is drawn, a shard
(2 GiB) saved with an index, then freed. The tokenizer is the bundled SmolLM2's, its BPE
vocabulary padded with placeholder tokens (``<pad12345>``: the encoder never produces them,
they decode to their own text) to the config's vocabulary size, so the parameter count is the
real config's; bos/eos are the tokenizer's.

It is then opened through the app's own path (``load_model`` with ``parse_placement(
max_memory=...)``, as ``llm-lens trace --max-memory`` does), with bfloat16 weights, in a fresh
process (``bench_placement.one``): 3 greedy tokens, every pane's analysis (lens, prompt lens,
attention overview and one map, positions, embedding projection, neighbours, layer paths,
"why this token?"), the peak resident memory (VmHWM) of each stage, load time and time per token.

It needs the model's size in free disk (``Qwen2.5-14B``, the default: 27.5 GiB) plus a
margin; where the disk is short it says so in one line and skips (``LLM_LENS_BENCH_BIG=0``
skips it too, for a ``make bench`` without it). The run is put in a memory cgroup capped at
16 GiB where one can be made. The files are deleted afterwards.

``.venv/bin/python benchmarks/bench_big.py [--config Qwen2.5-14B] [--cap cpu=12GiB]
[--folder DIR] [--keep]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
GIB = 2**30
BUDGET = 16 * GIB
SHARD = 2 * GIB
MARGIN = 8 * GIB  # free disk left to everything else on the machine
# the published config.json values that set the shapes (and the position encoding)
CONFIGS: dict[str, dict[str, Any]] = {
    "Llama-3.1-8B": {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
        "rope_parameters": {
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
        },
    },
    "Mistral-Nemo-12B": {
        "model_type": "mistral", "hidden_size": 5120, "intermediate_size": 14336,
        "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 1024000,
        "rms_norm_eps": 1e-5, "sliding_window": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    },
    "Qwen2.5-14B": {
        "model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 13824,
        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
        "vocab_size": 152064, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
        "use_sliding_window": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    },
}  # fmt: skip


def build_config(name: str) -> Any:
    """The transformers config of ``name``'s shape, untied head, the bundled tokenizer's ids."""
    from transformers import AutoConfig

    values = dict(CONFIGS[name])
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    config.tie_word_embeddings = False
    config.bos_token_id, config.eos_token_id, config.pad_token_id = 1, 2, 2
    return config


def parameter_count(config: Any) -> int:
    """Parameters of the model ``config`` describes, counted on ``meta`` (nothing allocated)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def write_weights(folder: Path, config: Any, seed: int = 0) -> int:
    """Seeded random bfloat16 weights of ``config``'s model in ``SHARD``-sized safetensors
    files and their index; one shard in memory at a time. Returns the parameter count."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(seed)
    shards: list[dict[str, Any]] = [{}]
    sizes = [0]
    for key, shape in shapes.items():
        nbytes = shape.numel() * 2
        if sizes[-1] and sizes[-1] + nbytes > SHARD:
            shards.append({})
            sizes.append(0)
        shards[-1][key], sizes[-1] = shape, sizes[-1] + nbytes
    total = len(shards)
    weight_map = {}
    for i, names in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{total:05d}.safetensors"
        tensors = {k: _draw(k, s, gen) for k, s in names.items()}
        save_file(tensors, str(folder / file), metadata={"format": "pt"})
        del tensors
        weight_map.update(dict.fromkeys(names, file))
    index = {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    config.dtype = "bfloat16"
    config.save_pretrained(folder)
    return sum(s.numel() for s in shapes.values())


def _draw(key: str, shape: Any, gen: Any) -> Any:
    """A norm's weight is ones (as initialised); a bias zeros; every other tensor N(0, 0.02)."""
    import torch

    if "norm" in key:
        return torch.ones(shape, dtype=torch.bfloat16)
    if key.endswith(".bias"):
        return torch.zeros(shape, dtype=torch.bfloat16)
    return torch.empty(shape, dtype=torch.bfloat16).normal_(0.0, 0.02, generator=gen)


def write_tokenizer(folder: Path, vocab_size: int) -> None:
    """The bundled model's tokenizer with its BPE vocabulary padded to ``vocab_size`` by
    placeholder tokens past its own ids (never produced by encoding; decoded as written)."""
    from llm_lens.core.loading import bundled_gguf, gguf_to_folder

    source = gguf_to_folder(bundled_gguf(), lambda *_: None)
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    data = json.loads((source / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    for i in range(len(vocab), vocab_size):
        vocab[f"<pad{i}>"] = i
    (folder / "tokenizer.json").write_text(json.dumps(data))


CGROUP = Path("/sys/fs/cgroup/memory")  # cgroup v1's memory controller, where mounted


@contextlib.contextmanager
def budget(limit: int) -> Iterator[dict[str, int]]:
    """While inside, this process and the children it starts are in a memory cgroup capped at
    ``limit`` bytes (anonymous memory and the page cache they use; the kernel reclaims the
    cache, or kills, at the cap), so the budget is enforced, not only read off VmHWM. Yields
    what the cgroup saw at the end (peak usage, times the cap was hit); empty, and no cap,
    where the controller is not there or not writable."""
    group = CGROUP / f"llm-lens-bench-big-{os.getpid()}"
    seen: dict[str, int] = {}
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit))
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        yield seen
        return
    try:
        yield seen
        for key in ("max_usage_in_bytes", "failcnt"):
            seen[key] = int((group / f"memory.{key}").read_text())
    finally:
        (CGROUP / "cgroup.procs").write_text(str(os.getpid()))
        group.rmdir()


def disk_short(folder: Path, need: int) -> str:
    """Why the disk under ``folder`` cannot take ``need`` bytes and the margin, or ''."""
    free = shutil.disk_usage(folder).free
    if free >= need + MARGIN:
        return ""
    return (f"needs {need / GIB:.0f} GiB of disk and {MARGIN / GIB:.0f} GiB spare; "
            f"{free / GIB:.0f} GiB free under {folder}")  # fmt: skip


def report(name: str, params: int, cap: str, r: dict[str, Any], made: float) -> None:
    stages = ("load", "decode", "panes", "explain")
    peak = max(r[f"{s}_peak"] for s in stages)
    fits = "under" if peak < BUDGET else "over"  # VmHWM counts the mapped weight files' pages
    peaks = ", ".join(f"{s} {r[f'{s}_peak'] / GIB:.2f}" for s in stages)
    print(
        f"  {name}: {params / 1e9:.2f} B parameters, bfloat16 ({params * 2 / GIB:.1f} GiB; written"
        f" in {made:.0f} s); --max-memory {cap}: {r['on_disk'] / GIB:.1f} GiB read from disk\n"
        f"  every pane's analysis ran ({', '.join(r['kinds'])}); tokens {r['tokens']}\n"
        f"  load {r['load_s']:.0f} s · prefill {r['prefill_ms'] / 1e3:.1f} s · decode "
        f"{r['decode_ms'] / 1e3:.1f} s/token · panes {r['panes_s']:.0f} s · explain "
        f"{r['explain_s']:.0f} s\n"
        f"  peak resident, VmHWM (GiB): {peaks}; peak {peak / GIB:.2f} GiB, {fits} 16 GiB "
        f"(load average {' '.join(f'{v:.1f}' for v in os.getloadavg())})",
        flush=True,
    )
    panes = ", ".join(f"{k} {v / GIB:.2f}" for k, v in r["pane_peaks"].items())
    print(f"  each pane's peak (GiB): {panes}")
    for when in ("load", "end"):
        split = r[f"{when}_rss"]
        print(f"  resident after {when}: {split['RssAnon'] / GIB:.2f} GiB made by the process, "
              f"{split['RssFile'] / GIB:.2f} GiB of mapped weight files")  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", choices=sorted(CONFIGS), default="Qwen2.5-14B")
    p.add_argument("--cap", default="cpu=12GiB", help="--max-memory for the load")
    p.add_argument("--folder", default=None, help="where to write (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the written model")
    p.add_argument("--tokens", type=int, default=3)
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_placement import child

    config = build_config(args.config)
    params = parameter_count(config)
    parent = Path(args.folder or tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    print(f"largest model on a 16 GiB budget: {args.config} ({params / 1e9:.2f} B parameters)")
    if os.environ.get("LLM_LENS_BENCH_BIG", "1") == "0":
        print("  skipped: LLM_LENS_BENCH_BIG=0")
        return 0
    if why := disk_short(parent, params * 2):
        print(f"  skipped: {why}")
        return 0
    folder = Path(tempfile.mkdtemp(prefix="bench-big-", dir=parent))
    try:
        t = time.perf_counter()
        write_weights(folder, config)
        write_tokenizer(folder, config.vocab_size)
        made = time.perf_counter() - t
        with budget(BUDGET) as seen:
            r = child([args.cap, str(folder), str(args.tokens), "bfloat16"])
        report(args.config, params, args.cap, r, made)
        if seen:
            print(f"  run in a memory cgroup capped at 16 GiB: it finished; the cgroup's peak "
                  f"{seen['max_usage_in_bytes'] / GIB:.2f} GiB (with the page cache it "
                  f"reclaims), the cap reached {seen['failcnt']} times")  # fmt: skip
        else:
            print("  (no memory cgroup could be made here: the peaks above are VmHWM only)")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
