"""Session file size: eight short runs (≤ 48 tokens each) of the bundled model, saved with their
recorded views (lens, prompt lens, prompt maps, vocabulary projection), as the window saves them.

Prints the file's size, the estimate given before saving and its error, and the save time, and
the file's bytes per array. ``--format 2`` writes the same runs in the format-2 layout (the
writer kept for tests in ``tests/core/session_v2.py``), for the before/after figures in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zipfile
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


def per_array(path: Path) -> list[tuple[str, int]]:
    """Compressed bytes in the file per array name (runs/*/NAME.npy summed over runs)."""
    sizes: dict[str, int] = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            name = info.filename.rsplit("/", 1)[-1].split(".")[0]
            sizes[name] = sizes.get(name, 0) + info.compress_size
    return sorted(sizes.items(), key=lambda kv: -kv[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", type=int, default=3, choices=(2, 3))
    args = parser.parse_args()
    configure_threads()
    from llm_lens.core.sessions.format import Session
    from llm_lens.core.sessions.views import recorded_run
    from llm_lens.core.sessions.write import estimate_size, save_session

    if args.format == 2:
        sys.path.insert(0, str(ROOT))
        from tests.core.session_v2 import write_format_2

        save_session = write_format_2  # noqa: F811
    engine = Engine(load_model())
    runs, memo = [], {}
    for prompt_text in PROMPTS:
        for params in SETTINGS:
            run = engine.start(engine.tokenize(prompt_text), params, RunConfig(max_new_tokens=48))
            run.run_all()
            runs.append(recorded_run(run, memo=memo))
    session = Session(engine.info.as_dict(), tuple(runs))
    steps = sum(len(r.steps) for r in runs)
    estimate = estimate_size(session)["total"]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "eight.llmlens"
        t0 = time.perf_counter()
        save_session(path, session)
        size = path.stat().st_size
        seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        from llm_lens.core.sessions.read import load_session

        load_session(path)
        read_s = time.perf_counter() - t0
        arrays = per_array(path)
    print(f"session format {args.format}: {len(runs)} runs, {steps} steps (≤ 48 tokens each)")
    print(f"  file          {size / 1e6:8.2f} MB ({size / 2**20:.2f} MiB)")
    if args.format == 3:
        print(f"  estimate      {estimate / 1e6:8.2f} MB ({100 * (estimate - size) / size:+.1f} %)")
    print(f"  save          {seconds:8.2f} s")
    print(f"  open          {read_s:8.2f} s")
    for name, nbytes in arrays:
        print(f"  {name:32s} {nbytes / 1e6:8.2f} MB")


if __name__ == "__main__":
    main()
