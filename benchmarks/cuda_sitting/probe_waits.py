"""Are the model thread's waits measured soundly on this device? A probe for the Timing pane.

The Timing pane shows the part of each step the model thread spent off the CPU (waiting for the
GIL or a core) where wall minus thread CPU time is that waiting (``core/loop/clock.py``): a CPU
with one torch thread, or another device where a check at load (:func:`off_cpu_share`: the
model's forward and a copy of its logits, timed) found that waiting for the device keeps the
thread on the CPU. A CUDA context does that by default (it spins while it waits when the
machine has more cores than contexts); one that sleeps fails the check, and the pane says the
waits are not measured.

This prints what the check decided, then runs the same greedy run three ways with the waits
measured regardless of the device: alone; beside a thread that holds the GIL for ``--hold`` ms
in every ``--every`` ms (as a window's GUI thread does in bursts); and beside a thread that
sleeps as much but never takes the GIL. For each it prints the median step and the median
off-CPU time a step. Where the measure is sound, the first and third show next to no waiting
and the second about the time the contender held the GIL; that is what the check at load
should have found.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from llm_lens.core.loading import load_model  # noqa: E402
from llm_lens.core.loop import engine as engine_module  # noqa: E402
from llm_lens.core.loop.engine import Engine, RunConfig  # noqa: E402
from llm_lens.core.runtime import synchronize  # noqa: E402
from llm_lens.core.sampling import GREEDY  # noqa: E402
from llm_lens.desktop.startup.app import tune_process  # noqa: E402

PROMPT = "Explain transformers like I am 12"


def contender(stop: threading.Event, hold_ms: float, every_ms: float, python: bool) -> None:
    """Hold the GIL (``python``) or sleep for ``hold_ms`` in every ``every_ms`` until ``stop``."""
    while not stop.is_set():
        end = time.perf_counter() + hold_ms / 1e3
        if python:
            while time.perf_counter() < end:
                sum(range(200))
        else:
            time.sleep(hold_ms / 1e3)
        time.sleep(max(0.0, every_ms - hold_ms) / 1e3)


def one_run(engine: Engine, tokens: int, side: str, hold: float, every: float) -> str:
    stop = threading.Event()
    thread = None
    if side != "alone":
        python = side == "GIL"
        thread = threading.Thread(target=contender, args=(stop, hold, every, python), daemon=True)
        thread.start()
    prompt = engine.tokenize(PROMPT, chat=True)
    try:
        steps = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=tokens)).run_all()[1:]
        synchronize(engine.device)
    finally:
        stop.set()
        if thread is not None:
            thread.join()
    wall = statistics.median(s.timing.total_ms for s in steps)
    waits = [
        s.timing.forward_wait_ms + s.timing.sample_wait_ms + s.timing.capture_wait_ms for s in steps
    ]
    return f"step {wall:6.2f} ms, off the CPU {statistics.median(waits):6.2f} ms a step"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a model folder or .gguf (default: bundled)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--hold", type=float, default=2.0, help="ms the contender holds")
    parser.add_argument("--every", type=float, default=10.0, help="ms between its holds")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    tune_process()  # the app's switch interval
    engine = Engine(load_model(args.model, args.device))
    threads, checked = torch.get_num_threads(), engine.device_waits_checked
    measured = engine_module.measures_waits(engine.device, threads, checked)
    print(f"device {engine.device}, torch threads {threads}, checked at load: {checked}, "
          f"measured by the app: {measured}")  # fmt: skip
    engine_module.measures_waits = lambda *_: True  # measure regardless
    engine.start(engine.tokenize(PROMPT, chat=True), GREEDY, RunConfig(max_new_tokens=4)).run_all()
    share = args.hold / args.every
    for rep in range(args.reps):
        for side in ("alone", "GIL", "sleep"):
            what = {"alone": "alone", "GIL": f"beside a thread holding the GIL {share:.0%}",
                    "sleep": "beside a thread that sleeps as long"}[side]  # fmt: skip
            got = one_run(engine, args.tokens, side, args.hold, args.every)
            print(f"rep {rep}: {what:44s} {got}")


if __name__ == "__main__":
    main()
