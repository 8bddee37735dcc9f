"""Each step's check that the model computed real numbers, and where it first did not.

A NaN or Inf in a forward pass (NaN in the weights, a float16 overflow) spreads to every later
layer and position and turns the logits NaN: the sampler would then choose a token from noise
(greedy) or blame its own settings. The check runs before sampling on what the step captured
anyway: the logits, the query's residual stream and attention outputs, and at a prefill every
position's residual stream, already copied to the host (tens of microseconds a step). Only when
it fails is the step's pass run once more with every sublayer probed
(:class:`~llm_lens.core.loop.capture.Probe`), over the same cache cropped back to before it, to
name the first stage that computed one; the hooks that cost nothing are never on otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from llm_lens.core.errors import NonFiniteError
from llm_lens.core.loop.capture import EMBEDDINGS, Capture, Probe, layer_output

HEAD = "the head's logits"


def check_step(
    engine: Any, cache: Any, cap: Capture, logits: Any, context: list[int], step: int, eager: bool
) -> None:
    """Raise :class:`NonFiniteError` naming the first stage that computed NaN or Inf in the
    pass that made ``logits`` (vocab,) for the last token of ``context``. ``cache`` (which the
    pass extended) is cropped for a second, probed pass; the run cannot go on after it anyway."""
    if _all_sums_finite(cap, logits) or (logits_finite(logits) and capture_finite(cap)):
        return
    position = len(context) - 1
    found = _probed(engine, cache, cap, context, eager) or _coarse(cap, logits, position)
    value, where, positions = found
    raise NonFiniteError(value, step, where, tuple(positions))


def _all_sums_finite(cap: Capture, logits: Any) -> bool:
    """The fast path: one float32 sum of the logits, the query's residual stream and attention
    outputs, finite (as it is unless one of them holds NaN or ±Inf), and a prefill's every
    position's sum finite too. False sends the step to the exact checks."""
    total = logits.sum(dtype=torch.float32)
    if cap.hidden:
        hidden, updates = cap.last_position()  # (layers + 1, hidden), (layers, hidden)
        total = total + hidden.sum(dtype=torch.float32) + updates.sum(dtype=torch.float32)
    positions = cap.prompt_positions  # (layers + 1, seq, hidden) float32 or None
    if not bool(torch.isfinite(total)):
        return False
    with np.errstate(all="ignore"):  # a NaN's sum is the answer here, not a warning
        return positions is None or bool(np.isfinite(positions.sum()))


def logits_finite(logits: Any) -> bool:
    """True unless a logit is NaN or +Inf, or every one is -Inf (a -Inf logit alone is a token
    the model rules out: probability 0, a real distribution still)."""
    if _sum_finite(logits) or bool(torch.isfinite(logits).all()):
        return True
    nan_or_inf = torch.isnan(logits).any() | torch.isposinf(logits).any()
    return not (bool(nan_or_inf) or _all_neg(logits))


def _all_neg(logits: Any) -> bool:
    return bool(torch.isneginf(logits).all())


def capture_finite(cap: Capture) -> bool:
    """The query's residual stream and attention outputs (stacked once; the record reads them
    too), and a prefill's residual stream at every position (copied to the host as it ran)."""
    if not cap.hidden:
        return True
    hidden, updates = cap.last_position()  # (layers + 1, hidden), (layers, hidden)
    if not (_sum_finite(hidden) and _sum_finite(updates)):
        return bool(torch.isfinite(hidden).all() & torch.isfinite(updates).all())
    positions = cap.prompt_positions  # (layers + 1, seq, hidden) or None
    return positions is None or bool(np.isfinite(positions).all())


def _sum_finite(values: Any) -> bool:
    """True when the float32 sum is finite, which a NaN or Inf anywhere makes it not: one
    reduction instead of a mask (a tenth of the time); a sum that overflows on real numbers
    (beyond 1e38) is checked again element by element."""
    return bool(torch.isfinite(values.sum(dtype=torch.float32)))


def _probed(
    engine: Any, cache: Any, cap: Capture, context: list[int], eager: bool
) -> tuple[str, str, list[int]] | None:
    """The step's pass again, every sublayer probed, from ``cache`` cropped to before it;
    None where the cache cannot be cropped or the second pass computed only real numbers."""
    prompt = cap.prompt_positions
    count = 1 if prompt is None else prompt.shape[1]  # the positions the pass read
    ids = torch.tensor([context[-count:]], device=engine.device)  # (1, count)
    try:
        cache.crop(len(context) - count)
        with Capture(engine.anatomy, fast=not eager, probe=True) as probe:
            logits = engine.forward(ids, cache, eager)
    except (AttributeError, NotImplementedError, RuntimeError, ValueError):
        return None  # a cache that cannot be cropped: the coarse answer stands
    return locate(probe.probes, logits, len(context) - 1, complete=False)


def _coarse(cap: Capture, logits: Any, position: int) -> tuple[str, str, list[int]]:
    """Where from the step's own capture alone: the embeddings, a layer's attention or the rest
    of the layer (its MLP), or the head."""
    hidden, updates = cap.last_position()  # (layers + 1, hidden), (layers, hidden)
    probes = [Probe(EMBEDDINGS, hidden[0])]
    for i in range(updates.shape[0]):
        probes += [Probe(f"layer {i}'s attention output", updates[i])]
        probes += [Probe(layer_output(i), hidden[i + 1])]
    found = locate(probes, logits, position)
    assert found is not None  # complete: the head is named when nothing else is
    return found


def locate(
    probes: list[Probe], logits: Any, position: int, complete: bool = True
) -> tuple[str, str, list[int]] | None:
    """("NaN" or "Inf", the first stage holding one, the positions where it did), the pass's
    last row being ``position``; the head when only the logits do, or None unless
    ``complete`` when nothing does."""
    for probe in probes:
        found = _bad_rows(probe)
        if found is not None:
            value, rows, count = found
            return value, probe.where, [position - (count - 1) + r for r in rows]
    if not complete and logits_finite(logits):
        return None
    value = "NaN" if bool(torch.isnan(logits).any()) or _all_neg(logits) else "Inf"
    return value, HEAD, [position]


def _bad_rows(probe: Probe) -> tuple[str, list[int], int] | None:
    """("NaN" or "Inf", the rows holding one, the rows in all) of a probe, or None where all
    its numbers are finite."""
    kept = probe.kept
    if kept.dim() < 2:
        kept = kept.reshape(1, -1)
    rows = kept.reshape(-1, kept.shape[-1])  # (positions, hidden) or (positions, 2)
    bad = ~torch.isfinite(rows).all(dim=-1)
    if not bool(bad.any()):
        return None
    value = "NaN" if bool(torch.isnan(rows).any()) else "Inf"
    return value, [int(i) for i in torch.nonzero(bad).flatten().tolist()], rows.shape[0]
