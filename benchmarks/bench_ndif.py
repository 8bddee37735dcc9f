"""NDIF-shaped capture: the bytes a step brings back from the server, against the activations.

A greedy 32-token chat run of the bundled model through the NDIF engine's trace (nnsight's
``remote="local"``: serialised exactly as for NDIF, run here), with the panes' captures reduced
on the server. Prints, per step (prefill and decode apart), the bytes the trace returned; the
bytes the local engine's record holds (the residual and attention-update vectors, every head's
attention row, the whole logits); and the full activations of the positions the step read (the
residual after every layer and each attention output at every position, and the logits,
float32). Also the run's wall time through nnsight against the local loop's.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from llm_lens.core.engines.ndif import CaptureSpec, NdifEngine  # noqa: E402
from llm_lens.core.engines.ndif.records import full_activation_bytes  # noqa: E402
from llm_lens.core.loading import load_model  # noqa: E402
from llm_lens.core.loop.engine import Engine, RunConfig  # noqa: E402
from llm_lens.core.runtime import configure_threads  # noqa: E402
from llm_lens.core.sampling import GREEDY  # noqa: E402

PROMPT = "Explain transformers like I am 12"
TOKENS = 32
SPECS = {
    "default (top-50, lens top-5)": CaptureSpec(),
    "+ 2 opened heads": CaptureSpec(heads=((3, 1), (20, 5))),
    "+ whole logits": CaptureSpec(full_logits=True),
}


def record_bytes(step) -> int:
    """What the local engine's record of a step carries in arrays."""
    arrays = (step.hidden, step.attn_update, step.attention, step.logits)
    return int(sum(np.asarray(a).nbytes for a in arrays))


def main() -> None:
    configure_threads()
    loaded = load_model()
    local = Engine(loaded)
    prompt = local.tokenize(PROMPT)
    t0 = time.perf_counter()
    want = local.start(prompt, GREEDY, RunConfig(max_new_tokens=TOKENS)).run_all()
    local_ms = (time.perf_counter() - t0) * 1e3
    info, n = loaded.info, len(prompt)
    print(f"bundled model {info.name}: prompt {n} tokens, {len(want)} steps, greedy")
    print(f"  full activations:  prefill {full_activation_bytes(info, n):>10,} B, "
          f"decode {full_activation_bytes(info, 1):>9,} B a step")  # fmt: skip
    print(f"  local engine's record: prefill {record_bytes(want[0]):>10,} B, "
          f"decode {np.mean([record_bytes(s) for s in want[1:]]):>9,.0f} B a step")  # fmt: skip
    engine = NdifEngine.local(loaded)
    for label, spec in SPECS.items():
        run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=TOKENS), spec=spec)
        run.run_all()
        assert [s.token.id for s in run.steps] == [s.token.id for s in want]
        per_step = run.step_bytes
        ratio = full_activation_bytes(info, 1) / np.mean(per_step[1:])
        print(f"  NDIF trace, {label}: prefill {per_step[0]:,} B, decode "
              f"{np.mean(per_step[1:]):,.0f} B a step ({ratio:,.0f}x less than the activations)"
              f"; run {run.wall_ms:,.0f} ms (local loop {local_ms:,.0f} ms)")  # fmt: skip


if __name__ == "__main__":
    main()
