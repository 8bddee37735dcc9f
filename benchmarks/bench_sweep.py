"""Cost of an activation-patching sweep on the bundled model with a 40-token prompt.

The residual map (30 layers × 40 positions) and the head map (30 layers × 9 heads) are timed
apart, after the two recorded plain runs, each in a fresh process per torch thread count
(``--threads 1 2``: OMP_NUM_THREADS and torch.set_num_threads both set; on a shared machine a
second thread can be slower than one, the spin-wait trap). Printed: wall seconds, the process's
CPU seconds, and the load average, against the target of the whole sweep in under 30 s on 2
cores. The corrupted prompt differs from the clean one at its 4th token (an early change: the
positions before it are the only ones the sweep may skip).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

TARGET_S = 30.0
TOKENS = 40
CLEAN = (
    "Anna lives in Paris. Every morning she walks past the old bakery, buys a "
    "warm loaf of bread and a coffee, and sits by the river to read the news. The city she "
    "lives in is"
)
CORRUPT = CLEAN.replace("Paris", "Rome", 1)


def load() -> str:
    return "load average " + " ".join(f"{v:.1f}" for v in os.getloadavg())


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall s, process CPU s: every thread's)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def prompts(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The clean and corrupted prompts, cut to the same TOKENS tokens."""
    clean = tokenizer.encode(CLEAN, add_special_tokens=False)
    corrupt = tokenizer.encode(CORRUPT, add_special_tokens=False)
    if len(clean) != len(corrupt) or len(clean) < TOKENS:
        raise SystemExit(f"the bench prompts are {len(clean)} and {len(corrupt)} tokens")
    return clean[-TOKENS:], corrupt[-TOKENS:]


def one(threads: int) -> None:
    """Time one sweep with ``threads`` torch threads (this process)."""
    import torch

    from llm_lens.core.anatomy import Anatomy
    from llm_lens.core.interventions.sweep import Metric, Sweep
    from llm_lens.core.loading import load_model

    loaded = load_model()
    torch.set_num_threads(threads)  # after the load, which sets the app's own thread count
    clean, corrupt = prompts(loaded.tokenizer)
    paris, rome = (
        loaded.tokenizer.encode(t, add_special_tokens=False)[0] for t in (" Paris", " Rome")
    )
    metric, anatomy = Metric(paris, rome), Anatomy.of(loaded.model)
    sweep = Sweep(loaded.model, anatomy, clean, corrupt)
    cells = {"residual": 0, "heads": 0}

    def count(name: str) -> Callable[[int], None]:
        return lambda n: cells.__setitem__(name, cells[name] + n)

    with torch.inference_mode():
        _, rec_w, rec_c = timed(sweep.prepare)
        resid, res_w, res_c = timed(lambda: sweep.residual(metric, count("residual")))
        heads, head_w, head_c = timed(lambda: sweep.heads(metric, count("heads")))
    total = rec_w + res_w + head_w
    verdict = "meets" if total < TARGET_S else "misses"
    print(f"{threads} torch thread(s), {len(clean)} tokens, prompts differ from position "
          f"{sweep.differ}; {load()}")  # fmt: skip
    rows = (
        ("two recorded runs", rec_w, rec_c),
        (f"residual map {resid.shape[0]}×{resid.shape[1]}", res_w, res_c),
        (f"head map {heads.shape[0]}×{heads.shape[1]}", head_w, head_c),
    )
    for name, wall, cpu in rows:
        print(f"  {name:20s} {wall:6.1f} s wall {cpu:6.1f} s CPU")
    print(f"  {'whole sweep':20s} {total:6.1f} s wall ({verdict} the {TARGET_S:.0f} s target); "
          f"{load()}")  # fmt: skip


def main(threads: list[int]) -> None:
    for n in threads:  # a fresh process each: OMP reads its thread count once
        env = os.environ | {"OMP_NUM_THREADS": str(n), "OMP_WAIT_POLICY": "PASSIVE"}
        subprocess.run([sys.executable, __file__, "--one", str(n)], check=True, env=env)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        one(args.one)
    else:
        main(args.threads)
