"""Cost of "why this token?": one step of a 100-token context on the bundled model, and the
peak memory of a long context.

Times the three stages of :func:`llm_lens.core.explain.attribution.explain` separately (the
hooked forward + backward pass, the logit split and gradient × input, the flow graph) and
prints the medians of a few repeats, in wall time and in the thread's own CPU time (the model
runs on one torch thread here, so CPU time is what the work costs, whatever else the shared
machine runs; wall time is what a user waits). Each figure is printed beside the load average.
Targets: attribution (pass + split) < 2 s, graph < 5 s.

``--memory 1024 4096``: the peak memory of the pass and of the graph, each context in its own
process (tracemalloc does not see torch's allocator: the process's peak resident set, VmHWM, is
reset through /proc/self/clear_refs before each stage and read after it, against the resident
set at its start).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from llm_lens.core.explain.attribution import input_attribution, logit_attribution  # noqa: E402
from llm_lens.core.explain.flow import flow_graph  # noqa: E402
from llm_lens.core.explain.trace import check_additive, trace_context  # noqa: E402
from llm_lens.core.loading import load_model  # noqa: E402
from llm_lens.core.loop.engine import Engine, RunConfig  # noqa: E402
from llm_lens.core.runtime import configure_threads  # noqa: E402
from llm_lens.core.sampling import GREEDY  # noqa: E402

TEXT = (
    "The transformer reads every token of the prompt at once. Each layer lets every position "
    "look back at the ones before it through attention, then passes the result through a small "
    "feed-forward network. After the last layer, the model turns the final position into a "
    "score for every word in its vocabulary and picks the next word. Then it does it all again, "
    "one token at a time, reading its own answer as it grows, until it writes a stop token or "
    "runs out of room. Nothing in it plans ahead: every word is chosen from the scores alone."
)


def load() -> str:
    return "load average " + " ".join(f"{v:.1f}" for v in os.getloadavg())


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall ms, this thread's CPU ms)."""
    w, c = time.perf_counter(), time.thread_time()
    out = fn()
    return out, (time.perf_counter() - w) * 1e3, (time.thread_time() - c) * 1e3


def stages(engine: Engine, step: Any) -> dict[str, tuple[float, float]]:
    """(wall ms, CPU ms) of each stage of one explanation, as ``explain`` runs them."""
    trace, *pass_ms = timed(lambda: trace_context(engine, step.context_ids, step.token.id))

    def split() -> None:
        check_additive(engine, trace)
        logit_attribution(engine, trace)
        input_attribution(engine, trace)

    _, *split_ms = timed(split)
    _, *graph_ms = timed(lambda: flow_graph(engine, trace))
    return {"pass": tuple(pass_ms), "split": tuple(split_ms), "graph": tuple(graph_ms)}  # type: ignore[dict-item]


def step_of(engine: Engine, context: int) -> Any:
    """A step that reads ``context`` tokens (the text repeated as needed, then one token)."""
    ids = engine.tokenize(TEXT, chat=False).ids
    ids = (ids * (context // len(ids) + 1))[: context - 1]
    prompt = engine.tokenize(engine.texts.join(ids), chat=False)
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=2))
    return run.run_all()[-1]  # step 1 reads the whole prompt + the first generated token


def main(context: int = 100, repeats: int = 5) -> None:
    configure_threads()
    engine = Engine(load_model())
    step = step_of(engine, context)
    stages(engine, step)  # warm-up
    runs = []
    plain = []
    for _ in range(repeats):
        runs.append(stages(engine, step))
        plain.append(plain_forward(engine, step.context_ids))
    med = {k: tuple(statistics.median(r[k][i] for r in runs) for i in (0, 1)) for k in runs[0]}
    ref = tuple(statistics.median(p[i] for p in plain) for i in (0, 1))
    attribution = tuple(med["pass"][i] + med["split"][i] for i in (0, 1))
    every = tuple(attribution[i] + med["graph"][i] for i in (0, 1))
    print(f"context {step.position + 1} tokens, {engine.info.name}, {torch.get_num_threads()} "
          f"torch thread(s), median of {repeats}; {load()}")  # fmt: skip
    print(f"  {'':26s} {'wall ms':>8s} {'CPU ms':>8s}")
    rows = (
        ("plain forward (reference)", ref, ""),
        ("forward + backward pass", med["pass"], ""),
        ("logit split + grad×input", med["split"], ""),
        ("attribution (pass+split)", attribution, "   target < 2000"),
        ("flow graph (after pass)", med["graph"], "   target < 5000"),
        ("everything, one request", every, ""),
    )
    for name, (wall, cpu), note in rows:
        print(f"  {name:26s} {wall:8.0f} {cpu:8.0f}{note}")
    print(f"  in plain forwards (CPU): attribution {attribution[1] / ref[1]:.2f}×, "
          f"graph {med['graph'][1] / ref[1]:.2f}×; {load()}")  # fmt: skip


def memory(context: int, graph: bool = True) -> None:
    """Peak resident memory added by the pass, then by the graph, at ``context`` tokens."""
    configure_threads()
    engine = Engine(load_model())
    step = step_of(engine, context)
    base = reset_peak()
    trace, wall, cpu = timed(lambda: trace_context(engine, step.context_ids, step.token.id))
    print(f"context {step.position + 1}: pass +{peak_mb() - base:.0f} MB peak "
          f"({wall / 1e3:.1f} s wall, {cpu / 1e3:.1f} s CPU); weights kept: "
          f"{trace.kept_weights is not None}; {load()}", flush=True)  # fmt: skip
    if graph:
        base = reset_peak()
        _, gwall, gcpu = timed(lambda: flow_graph(engine, trace))
        print(f"  graph +{peak_mb() - base:.0f} MB more ({gwall / 1e3:.1f} s wall, "
              f"{gcpu / 1e3:.1f} s CPU); {load()}")  # fmt: skip


def peak_mb(field: str = "VmHWM") -> float:
    """The process's peak resident set since the last reset (VmHWM), in MB."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith(field))
    return int(line.split()[1]) / 1024


def reset_peak() -> float:
    """Reset the peak to the resident set now (Linux), and return that (MB)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return peak_mb("VmRSS")


def plain_forward(engine: Engine, ids: object) -> tuple[float, float]:
    """(wall, CPU) ms of one forward over the context (the unit the costs are compared with)."""
    x = torch.tensor([list(ids)])  # type: ignore[call-overload]
    with torch.inference_mode():
        _, wall, cpu = timed(lambda: engine.model(x, logits_to_keep=1))
    return wall, cpu


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--context", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--memory", type=int, nargs="*", help="contexts to measure peak memory at")
    p.add_argument("--no-graph", action="store_true", help="--memory: the pass only")
    p.add_argument("--one-memory", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one_memory:
        memory(args.one_memory, not args.no_graph)
    elif args.memory:
        for n in args.memory:  # a fresh process each: the peak is per process
            more = ["--no-graph"] if args.no_graph else []
            subprocess.run([sys.executable, __file__, "--one-memory", str(n), *more], check=True)
    else:
        main(args.context, args.repeats)
