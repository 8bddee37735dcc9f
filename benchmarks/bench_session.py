"""Session file size: eight short runs (≤ 48 tokens each) of the bundled model, saved with their
recorded views (lens, prompt lens, prompt maps, vocabulary projection), as the window saves them.

Prints the file's size, the estimate given before saving and its error, and the save time.
``--format 1`` writes the same runs with the format-1 writer of git ``main`` (loaded from
``git show``), for the before/after figures in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from llm_lens.core.loading import load_model  # noqa: E402
from llm_lens.core.loop.engine import Engine, RunConfig  # noqa: E402
from llm_lens.core.runtime import configure_threads  # noqa: E402
from llm_lens.core.sampling import GREEDY, SamplingParams  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = (
    "The bank by the river banked money.",
    "Explain transformers like I am 12",
    "Write a haiku about the sea.",
    "What is the capital of France?",
)
SETTINGS = (GREEDY, SamplingParams(temperature=0.9, top_p=0.9, seed=1))


def format1_writer() -> types.ModuleType:
    """``core/sessions/format.py`` and ``write.py`` as on git main (format 1), as modules."""
    saved = {}
    for name in ("format", "write"):
        source = subprocess.run(["git", "show", f"main:core/sessions/{name}.py"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
        module = types.ModuleType(f"llm_lens.core.sessions.{name}")
        saved[name] = sys.modules.get(module.__name__)
        sys.modules[module.__name__] = module
        exec(compile(source, f"main:{name}.py", "exec"), module.__dict__)  # noqa: S102
    write = sys.modules["llm_lens.core.sessions.write"]
    for name, module in saved.items():  # the views module keeps the current format
        if module is not None:
            sys.modules[f"llm_lens.core.sessions.{name}"] = module
    return write


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", type=int, default=2, choices=(1, 2))
    args = parser.parse_args()
    configure_threads()
    from llm_lens.core.sessions.format import Session
    from llm_lens.core.sessions.views import recorded_run

    writer = format1_writer() if args.format == 1 else None
    if writer is None:
        from llm_lens.core.sessions import write as writer
    engine = Engine(load_model())
    runs, memo = [], {}
    for prompt_text in PROMPTS:
        for params in SETTINGS:
            run = engine.start(engine.tokenize(prompt_text), params, RunConfig(max_new_tokens=48))
            run.run_all()
            runs.append(recorded_run(run, memo=memo))
    session = Session(engine.info.as_dict(), tuple(runs))
    steps = sum(len(r.steps) for r in runs)
    estimate = writer.estimate_size(session)["total"]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "eight.llmlens"
        t0 = time.perf_counter()
        size = writer.save_session(path, session)
        seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        from llm_lens.core.sessions.read import load_session

        load_session(path)
        read_s = time.perf_counter() - t0
    print(f"session format {args.format}: {len(runs)} runs, {steps} steps (≤ 48 tokens each)")
    print(f"  file          {size / 1e6:8.2f} MB ({size / 2**20:.2f} MiB)")
    print(f"  estimate      {estimate / 1e6:8.2f} MB ({100 * (estimate - size) / size:+.1f} %)")
    print(f"  save          {seconds:8.2f} s")
    print(f"  open          {read_s:8.2f} s")


if __name__ == "__main__":
    main()
