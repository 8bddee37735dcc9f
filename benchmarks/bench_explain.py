"""Cost of "why this token?": one step of a 100-token context on the bundled model.

Times the three stages of :func:`llm_lens.core.explain.attribution.explain` separately (the
hooked forward + backward pass, the logit split and gradient × input, the flow graph) and
prints the medians of a few repeats. Targets: attribution (pass + split) < 2 s, graph < 5 s.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from llm_lens.core.explain.attribution import explain  # noqa: E402
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


def main(context: int = 100, repeats: int = 3) -> None:
    configure_threads()
    engine = Engine(load_model())
    ids = engine.tokenize(TEXT, chat=False)
    assert len(ids) >= context, len(ids)
    prompt = engine.tokenize(engine.texts.join(ids.ids[: context - 1]), chat=False)
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=2))
    step = run.run_all()[-1]  # step 1 reads the whole prompt + the first generated token
    explain(engine, step)  # warm-up
    times: dict[str, list[float]] = {}
    for _ in range(repeats):
        x = explain(engine, step)
        for name, ms in x.timings_ms:
            times.setdefault(name, []).append(ms)
    med = {k: statistics.median(v) for k, v in times.items()}
    plain = statistics.median(plain_forward(engine, step.context_ids) for _ in range(repeats))
    edges = int(x.graph.kept(0.04).sum())
    print(f"context {step.position + 1} tokens, {engine.info.name}, median of {repeats}")
    print(f"  plain forward (reference) {plain:8.0f} ms   (the same context, inference mode)")
    print(f"  forward + backward pass   {med['pass']:8.0f} ms")
    print(f"  logit split + grad×input  {med['logit']:8.0f} ms")
    print(f"  attribution (pass+split)  {med['pass'] + med['logit']:8.0f} ms   target < 2000")
    print(f"  flow graph (after pass)   {med['graph']:8.0f} ms   ({len(x.graph.weight)} edges")
    print(f"      at floor 0.01, {edges} at 0.04)")
    total = sum(med.values())
    print(f"  everything, one request   {total:8.0f} ms   target < 5000")
    ratios = f"{(med['pass'] + med['logit']) / plain:.2f}× / {total / plain:.2f}×"
    print(f"  attribution / everything in plain forwards: {ratios}")


def plain_forward(engine: Engine, ids: object) -> float:
    """ms of one forward over the context (the unit the costs are compared with)."""
    x = torch.tensor([list(ids)])  # type: ignore[call-overload]
    with torch.inference_mode():
        t0 = time.perf_counter()
        engine.model(x, logits_to_keep=1)
        return (time.perf_counter() - t0) * 1e3


if __name__ == "__main__":
    main()
