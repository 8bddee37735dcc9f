"""A model spread over CPU and disk (``--max-memory``), against the same model whole.

1. The bundled SmolLM2 whole and with ``cpu=150MiB`` (2 layers on the CPU, 28 read from disk
   on every forward): load time, prefill, decode time per token, "why this token?" and the
   process's peak resident memory (VmHWM, reset through /proc/self/clear_refs before each
   stage), each configuration in its own process.
2. A Llama-style model of random weights (a real config's shape, scaled down so this machine
   writes and reads it in a minute) saved sharded and opened with ``cpu=200MiB``: every pane's
   analysis runs, and the peak resident memory is measured against its weights' bytes. From it,
   the memory a 16 GiB budget must hold for larger real configs is estimated (the disk-offloaded
   layers cost disk, not memory: what stays is the resident pieces, one layer at a time, the
   activations of a short prompt), and the largest that fits is named. An estimate; the
   measured 16 GiB run (a real config's shape, as large as the disk allows) is
   ``bench_big.py``, which runs ``one`` below on it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
GIB = 2**30
# (name, hidden, intermediate, layers, heads, kv heads, vocab): the public configs' shapes
REAL = [
    ("Llama-3.2-1B", 2048, 8192, 16, 32, 8, 128256),
    ("Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128256),
    ("Qwen2.5-32B", 5120, 27648, 64, 40, 8, 152064),
    ("Llama-3.1-70B", 8192, 28672, 80, 64, 8, 128256),
    ("Llama-3.1-405B", 16384, 53248, 126, 128, 8, 128256),
]


def peak_reset() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def rss_split() -> dict[str, int]:
    """Resident bytes now: anonymous (the heap: what the process made) and file-backed (pages
    of mapped files, such as the safetensors weights transformers maps without copying)."""
    return {key: status(key) for key in ("RssAnon", "RssFile")}


def one(
    cap: str | None, spec: str | None, tokens: int, explain: bool, dtype: str = "auto"
) -> dict[str, Any]:
    """Load (weights as ``dtype``), decode ``tokens`` greedy tokens, every pane's analysis (with
    ``explain``: attribution); the times and peaks of each stage."""
    from llm_lens.core.loading import load_model
    from llm_lens.core.loop.analyses import compute
    from llm_lens.core.loop.engine import Engine, RunConfig
    from llm_lens.core.placement import parse_placement
    from llm_lens.core.runtime import configure_threads
    from llm_lens.core.sampling import GREEDY

    configure_threads()
    out: dict[str, Any] = {}
    peak_reset()
    t = time.perf_counter()
    place = parse_placement(max_memory=cap) if cap else None
    engine = Engine(load_model(spec, device="cpu", dtype=dtype, placement=place))
    out["load_s"], out["load_peak"] = time.perf_counter() - t, status("VmHWM")
    out["load_rss"] = rss_split()
    out["weights_bytes"] = sum(p.numel() * p.element_size() for p in engine.model.parameters())
    out["params"] = engine.info.num_parameters
    out["on_disk"] = sum(b for _n, w, b in engine.info.placement if w == "disk")
    peak_reset()
    run = engine.start(engine.tokenize("Explain transformers like I am 12"), GREEDY,
                       RunConfig(max_new_tokens=tokens))  # fmt: skip
    steps = run.run_all()
    out["prefill_ms"] = steps[0].timing.forward_ms
    out["decode_ms"] = statistics.median(s.timing.forward_ms for s in steps[1:])
    out["decode_peak"] = status("VmHWM")
    out["tokens"] = [s.token.id for s in steps]
    t = time.perf_counter()
    last = engine.info.num_layers - 1
    kinds = [
        ("lens", {"step": 1}),
        ("attention_overview", {}),
        ("positions", {"positions": 64}),
        ("attention_map", {"layer": last, "head": 0}),
        ("neighbours", {"token_id": 100}),
        ("prompt_lens", {}),
        ("hidden_paths", {}),
        ("embedding_projection", {}),
    ]
    out["kinds"] = [kind for kind, _ in kinds] + (["explain"] if explain else [])
    out["pane_peaks"] = {}
    for kind, args in kinds:  # each pane's own peak (a pane reading whole weights shows here)
        peak_reset()
        assert compute(kind, engine, run, args) is not None, f"{kind}: nothing computed"
        out["pane_peaks"][kind] = status("VmHWM")
    out["panes_s"], out["panes_peak"] = time.perf_counter() - t, max(out["pane_peaks"].values())
    if explain:
        peak_reset()
        t = time.perf_counter()
        assert compute("explain", engine, run, {"step": 1}) is not None, "explain: nothing"
        out["explain_s"], out["explain_peak"] = time.perf_counter() - t, status("VmHWM")
    out["end_rss"] = rss_split()
    return out


def child(args: list[str]) -> dict[str, Any]:
    """``one(...)`` in a fresh process, so each peak is its own."""
    cmd = [sys.executable, __file__, "--one", *args]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def load() -> str:
    return "load average " + " ".join(f"{v:.1f}" for v in os.getloadavg())


def bundled() -> None:
    print(f"1. bundled SmolLM2-135M (float32), 16 greedy tokens, one torch thread ({load()})")
    rows = {"whole": child(["", "", "16"]), "cpu=150MiB": child(["cpu=150MiB", "", "16"])}
    assert rows["whole"]["tokens"] == rows["cpu=150MiB"]["tokens"], "tokens differ"
    for name, r in rows.items():
        print(
            f"  {name:11s} load {r['load_s']:.1f} s · prefill {r['prefill_ms']:.0f} ms · "
            f"decode {r['decode_ms']:.0f} ms/token · explain {r['explain_s']:.1f} s · peak "
            f"resident: decode {r['decode_peak'] / 2**20:.0f} MiB, explain "
            f"{r['explain_peak'] / 2**20:.0f} MiB · {r['on_disk'] / 2**20:.0f} MiB on disk"
        )
    print("  tokens equal: yes", flush=True)


def llama_folder(folder: str, hidden: int, layers: int, vocab: int) -> None:
    """A Llama-style model of random weights, saved in 200 MB shards."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from llm_lens.core.loading import bundled_gguf, gguf_to_folder

    config = LlamaConfig(
        hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_hidden_layers=layers,
        num_attention_heads=hidden // 64, num_key_value_heads=hidden // 256, vocab_size=vocab,
        max_position_embeddings=2048, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder, max_shard_size="200MB")
    AutoTokenizer.from_pretrained(gguf_to_folder(bundled_gguf(), lambda *_: None)).save_pretrained(
        folder
    )


def needed(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int,
           nbytes: int, base: int) -> tuple[float, int]:  # fmt: skip
    """(parameters, resident bytes) of a config read from disk a layer at a time: the process's
    own base, the embedding table and head (kept on the CPU: every step reads them whole), two
    layers (the one running and the one loading); a short prompt's activations are in ``base``."""
    head_dim = hidden // heads
    layer = 2 * hidden * hidden + 2 * hidden * kv * head_dim + 3 * hidden * inter
    params = layers * layer + 2 * vocab * hidden
    resident = base + (2 * vocab * hidden + 2 * layer) * nbytes
    return params, resident


def largest() -> None:
    print("2. the largest model on a 16 GiB budget (cpu=16GiB, disk offload)", flush=True)
    hidden, layers, vocab = 1024, 8, 49152  # the bundled tokenizer's vocabulary
    with tempfile.TemporaryDirectory() as folder:
        t = time.perf_counter()
        llama_folder(folder, hidden, layers, vocab)
        made = time.perf_counter() - t
        r = child(["cpu=200MiB", folder, "4"])
    peak = max(r["decode_peak"], r["explain_peak"], r["panes_peak"])
    print(
        f"  measured: Llama-style {r['params'] / 1e6:.0f} M parameters "
        f"({r['weights_bytes'] / 2**20:.0f} MiB float32; written in {made:.0f} s), cpu=200MiB: "
        f"{r['on_disk'] / 2**20:.0f} MiB on disk; every pane ran, explain "
        f"{r['explain_s']:.1f} s; decode {r['decode_ms']:.0f} ms/token; peak resident: load "
        f"{r['load_peak'] / 2**20:.0f} MiB, decode {r['decode_peak'] / 2**20:.0f}, panes "
        f"{r['panes_peak'] / 2**20:.0f}, explain {r['explain_peak'] / 2**20:.0f} ({load()})"
    )
    kv_dim = (hidden // 256) * (hidden // (hidden // 64))
    layer = 2 * hidden * hidden + 2 * hidden * kv_dim + 3 * hidden * (hidden * 11 // 4)
    # the process's own share: the measured peak less the weights that were resident at most
    # (embedding, head, two layers), never below what torch and transformers take alone
    base = max(peak - (2 * vocab * hidden + 2 * layer) * 4, 400 * 2**20)
    print(f"  estimate for a short prompt (process {base / 2**20:.0f} MiB + embedding, head and two"
          " layers resident; every other layer on disk):")  # fmt: skip
    for name, h, i, n, heads, kv, v in REAL:
        for label, nb in (("float32", 4), ("bfloat16", 2)):
            params, res = needed(h, i, n, heads, kv, v, nb, base)
            fits = "fits" if res <= 16 * GIB else "does not fit"
            print(f"    {name:15s} {params / 1e9:6.1f} B params {label:8s}: ~{res / GIB:5.1f} GiB "
                  f"resident, {params * nb / GIB:6.0f} GiB on disk — {fits}")  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        cap, spec, tokens = sys.argv[2], sys.argv[3], int(sys.argv[4])
        dtype = sys.argv[5] if len(sys.argv) > 5 else "auto"
        print(json.dumps(one(cap or None, spec or None, tokens, explain=True, dtype=dtype)))
    else:
        bundled()
        largest()
