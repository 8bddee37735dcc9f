"""Engine benchmarks: load times, plain loop vs capture loop vs generate(), memory floor.

Prints a table and, with ``--write``, the measured section of docs/performance.md. Ratios are
measured in one process run, on the same model, dtype, threads and prompts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from llm_lens.core.loading import bundled_gguf, load_model  # noqa: E402
from llm_lens.core.loop.engine import EAGER_PREFILL_LIMIT, Engine, RunConfig  # noqa: E402
from llm_lens.core.runtime import configure_threads, synchronize  # noqa: E402
from llm_lens.core.sampling import GREEDY  # noqa: E402


def time_loads() -> dict[str, float]:
    """Seconds to load the bundled model from its GGUF (fresh cache) and from the copy."""
    with tempfile.TemporaryDirectory() as cache:
        os.environ["LLM_LENS_CACHE"] = cache
        t0 = time.perf_counter()
        load_model()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        load_model()
        again = time.perf_counter() - t0
    os.environ.pop("LLM_LENS_CACHE")
    return {"first launch (GGUF → float32 copy)": first, "later launches (copy)": again}


def plain_loop(engine: Engine, ids: list[int], n: int) -> tuple[float, list[float]]:
    """The baseline: cached forward + argmax, no hooks, no records. (prefill ms, step ms)."""
    dev = engine.device
    with torch.inference_mode():
        cache = engine.new_cache()
        t0 = time.perf_counter()
        x = torch.tensor([ids], device=dev)
        logits = engine.forward(x, cache, len(ids) <= EAGER_PREFILL_LIMIT)
        synchronize(dev)
        prefill = (time.perf_counter() - t0) * 1e3
        steps = []
        for _ in range(n):
            tok = torch.argmax(logits).reshape(1, 1)
            t0 = time.perf_counter()
            logits = engine.forward(tok, cache, True)
            int(torch.argmax(logits))  # the token reaches the host, as a sampler's would
            steps.append((time.perf_counter() - t0) * 1e3)
    return prefill, steps


def capture_loop(engine: Engine, ids: list[int], n: int) -> tuple[float, list[float]]:
    prompt = engine.tokenize("x", chat=False)
    prompt = type(prompt)(
        prompt.text, prompt.rendered, False, tuple(engine.texts.info(i) for i in ids)
    )
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=n + 1))
    t_last = time.perf_counter()
    wall = []
    for _ in run:
        now = time.perf_counter()
        wall.append((now - t_last) * 1e3)
        t_last = now
    kv = run.steps[-1].kv
    if kv.device_allocated is not None:  # CUDA: what the device holds beside the cache
        print(
            f"  KV cache {kv.bytes_total / 2**20:.1f} MiB (formula {kv.formula_bytes / 2**20:.1f}"
            f" MiB); device allocated {kv.device_allocated / 2**20:.0f} MiB, reserved "
            f"{kv.device_reserved / 2**20:.0f} MiB"
        )
    return wall[0], wall[1:]


def generate_ms(engine: Engine, ids: list[int], n: int) -> float:
    """Total ms of model.generate() for ``n`` new tokens (prefill included)."""
    with torch.inference_mode():
        x = torch.tensor([ids], device=engine.device)
        t0 = time.perf_counter()
        engine.model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        synchronize(engine.device)
        return (time.perf_counter() - t0) * 1e3


def long_prompt(engine: Engine, filler: list[int], tokens: int = 4000) -> None:
    """A 4,000-token prompt: prefill time, resident memory above the weights, a pane's window."""
    import resource

    from llm_lens.core import attention

    ids = (filler * (tokens // len(filler) + 1))[:tokens]
    prompt = engine.tokenize("x", chat=False)
    prompt = type(prompt)(prompt.text, prompt.rendered, False,
                          tuple(engine.texts.info(i) for i in ids))  # fmt: skip
    rss0 = _rss_mb()
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=4))
    t0 = time.perf_counter()
    run.run_all()
    total = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    attention.attention_map(engine, run.cache, run.prefill.hidden, 12, 4, max_size=256)
    window = (time.perf_counter() - t0) * 1e3
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{tokens}-token prompt: prefill {run.steps[0].timing.total_ms:.0f} ms, 4 tokens in "
        f"{total:.0f} ms; RSS now {_rss_mb() - rss0:+.0f} MB over the loaded model, "
        f"peak RSS {peak:.0f} MB; one pooled 256² attention window {window:.0f} ms"
    )


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def decode_variants(engine: Engine, ids: list[int], n: int) -> None:
    """What else might speed decode up: thread counts and bfloat16 weights (same process)."""
    for threads in (1, 2):
        torch.set_num_threads(threads)
        _, steps = plain_loop(engine, ids, n)
        print(f"decode with {threads} thread(s): {statistics.median(steps):6.1f} ms/token")
    torch.set_num_threads(configure_threads())
    engine.model.to(torch.bfloat16)
    plain_loop(engine, ids, 2)
    _, steps = plain_loop(engine, ids, n)
    print(f"decode in bfloat16 weights:  {statistics.median(steps):6.1f} ms/token")
    engine.model.to(torch.float32)


def compiled_decode(engine: Engine, ids: list[int], n: int) -> None:
    """torch.compile (inductor) on a static cache, against the same generate() without it."""
    model, x = engine.model, torch.tensor([ids], device=engine.device)

    def per_token(**kw: object) -> float:
        with torch.inference_mode():
            times = []
            for new in (1, n + 1):
                t0 = time.perf_counter()
                model.generate(x, max_new_tokens=new, min_new_tokens=new, do_sample=False, **kw)
                times.append((time.perf_counter() - t0) * 1e3)
        return (times[1] - times[0]) / n

    static = {"cache_implementation": "static"}
    per_token(**static)  # warm-up
    print(f"decode, static cache, eager:        {per_token(**static):6.1f} ms/token")
    plain_forward = model.forward
    model.set_attn_implementation("sdpa")
    model.forward = torch.compile(plain_forward, dynamic=False)
    t0 = time.perf_counter()
    per_token(**static)
    warm = time.perf_counter() - t0
    print(f"decode, static cache, torch.compile: {per_token(**static):6.1f} ms/token "
          f"(compiling took {warm:.0f} s)")  # fmt: skip
    model.forward = plain_forward


def bandwidth_gbs(device: torch.device) -> float:
    """Copy bandwidth of the memory the weights live in (host RAM, or the GPU's)."""
    if device.type != "cpu":
        a = torch.ones(256 * 1024 * 1024 // 4, device=device)
        b = torch.empty_like(a)
        b.copy_(a)
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(5):
            b.copy_(a)
        synchronize(device)
        return 2 * a.numel() * 4 * 5 / (time.perf_counter() - t0) / 1e9
    a = np.ones(256 * 1024 * 1024 // 8)
    b = np.empty_like(a)
    np.copyto(b, a)
    t0 = time.perf_counter()
    for _ in range(5):
        np.copyto(b, a)
    return 2 * a.nbytes * 5 / (time.perf_counter() - t0) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument(
        "--model", default=None, help="a model folder or .gguf file (default: the bundled model)"
    )
    parser.add_argument("--long", type=int, default=4000, help="long prompt length (0: skip)")
    parser.add_argument("--compile", action="store_true", help="also try torch.compile (slow)")
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda, mps")
    parser.add_argument("--dtype", default="auto", help="auto: bfloat16 on CUDA, else float32")
    args = parser.parse_args()
    threads = configure_threads()
    print(
        f"torch {torch.__version__}, threads {threads}, OMP_WAIT_POLICY "
        f"{os.environ.get('OMP_WAIT_POLICY')}, model {args.model or bundled_gguf().name}"
    )
    if not args.skip_load and args.model is None:
        for k, v in time_loads().items():
            print(f"load  {k:40s} {v:7.2f} s")
    engine = Engine(load_model(args.model, args.device, args.dtype))
    print(f"device {engine.device}, dtype {engine.info.dtype}")
    base = engine.tokenize("Explain transformers like I am 12", chat=False).ids
    filler = engine.tokenize(" the quick brown fox jumps over the lazy dog." * 120, chat=False).ids
    weights = sum(p.numel() * p.element_size() for p in engine.model.parameters())
    bw = bandwidth_gbs(engine.device)
    print(
        f"weights {weights / 1e6:.0f} MB, memory copy bandwidth {bw:.1f} GB/s, "
        f"floor {weights / bw / 1e6:.1f} ms/token"
    )
    plain_loop(engine, base, 4)  # warm-up
    for name, ids in (("40-token", (base * 8)[:40]), ("1000-token", filler[:1000])):
        # one unmeasured pass of each at this length first: on a GPU the first pass at a new
        # length (kernel choice, allocator growth) made whichever ran first 1.5-8x slower
        plain_loop(engine, ids, 2)
        capture_loop(engine, ids, 2)
        generate_ms(engine, ids, 2)
        p_pre, p_steps = plain_loop(engine, ids, args.tokens)
        c_pre, c_steps = capture_loop(engine, ids, args.tokens)
        gen = generate_ms(engine, ids, args.tokens)
        p_med, c_med = statistics.median(p_steps), statistics.median(c_steps)
        print(
            f"{name:10s} prefill plain {p_pre:7.1f} ms  capture {c_pre:7.1f} ms  "
            f"ratio {c_pre / p_pre:4.2f}"
        )
        print(
            f"{name:10s} decode  plain {p_med:7.1f} ms  capture {c_med:7.1f} ms  "
            f"ratio {c_med / p_med:4.2f}"
        )
        plain_total = p_pre + sum(p_steps)
        print(
            f"{name:10s} whole run of {args.tokens} tokens: plain loop {plain_total:7.0f} ms  "
            f"generate() {gen:7.0f} ms  ratio {plain_total / gen:4.2f}"
        )
    if engine.device.type == "cpu":  # thread counts and a bf16 cast are CPU questions
        decode_variants(engine, (base * 8)[:40], args.tokens)
    if args.compile:
        compiled_decode(engine, (base * 8)[:40], args.tokens)
    if args.long:
        long_prompt(engine, filler, args.long)


if __name__ == "__main__":
    main()
