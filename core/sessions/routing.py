"""Mixture-of-experts routing in a session file: one optional entry per run, three arrays.

A run's steps have different numbers of rows (the prefill: the prompt; a decode step: one), so
their routings are concatenated along the rows axis, with each step's row count in the
manifest: ``"routing": {"probs", "experts", "weights", "rows", "layers", "scoring"}``. The
router probabilities are stored as float16, the chosen experts as int32 and their weights as
float32 (what the MoE block used, exactly). Files without the entry (dense models, older files)
read back with ``routing`` None on every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from llm_lens.core.experts import ExpertRouting
from llm_lens.core.records import StepRecord, frozen
from llm_lens.core.sessions.format import SessionError

SCORINGS = ("softmax", "sigmoid")
ARRAYS = (("probs", "half"), ("experts", "int32"), ("weights", "float32"))  # (key, stored as)


def pack(steps: Sequence[StepRecord]) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """The manifest entry (member names still to be filled in) and the arrays to store, or None
    when no step has a routing."""
    routed = [s.routing for s in steps if s.routing is not None]
    if not routed:
        return None
    first = routed[0]
    same = all(
        np.array_equal(r.layers, first.layers)
        and r.num_experts == first.num_experts
        and r.top_k == first.top_k
        for r in routed
    )
    if not same:  # one model per run: never expected
        raise ValueError("the steps of one run are routed over different layers or experts")
    entry = {
        "rows": [0 if s.routing is None else s.routing.rows for s in steps],
        "layers": [int(n) for n in first.layers],
        "scoring": first.scoring,
    }
    arrays = {key: np.concatenate([getattr(r, key) for r in routed], axis=1) for key, _ in ARRAYS}
    return entry, arrays


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise SessionError(f"routing: {message}")


def _counts(value: Any, what: str) -> list[int]:
    ok = isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)
    _need(ok, f"malformed {what}")
    return list(value)


def unpack(
    entry: Any, arrays: dict[str, np.ndarray], steps: tuple[StepRecord, ...]
) -> tuple[StepRecord, ...]:
    """``steps`` with their routing put back from the run's entry (unchanged when it is None)."""
    if entry is None:
        return steps
    _need(isinstance(entry, dict), "malformed entry")
    rows = _counts(entry.get("rows"), "rows")
    layers = _counts(entry.get("layers"), "layers")
    _need(len(rows) == len(steps), "rows do not match the steps")
    _need(entry.get("scoring") in SCORINGS, f"unknown scoring {entry.get('scoring')!r}")
    data = {}
    for key, _ in ARRAYS:
        name = entry.get(key)
        _need(isinstance(name, str) and name in arrays, f"array {name!r} is not in the file")
        data[key] = arrays[name]
    probs, experts, weights = data["probs"], data["experts"], data["weights"]
    _need(probs.ndim == 3 and probs.shape[:2] == (len(layers), sum(rows)), "probs shape")
    _need(experts.ndim == 3 and experts.shape[:2] == probs.shape[:2], "experts shape")
    _need(weights.shape == experts.shape, "weights shape")
    _need(experts.size == 0 or 0 <= experts.min() <= experts.max() < probs.shape[2], "expert ids")
    out, start = [], 0
    for step, n in zip(steps, rows, strict=True):
        if n == 0:
            out.append(step)
            continue
        _need(n <= step.position + 1, f"step {step.index} has more rows than positions")
        cut = slice(start, start + n)
        routing = ExpertRouting(
            layers=frozen(layers, np.int64),
            probs=frozen(probs[:, cut], np.float32),
            experts=frozen(experts[:, cut], np.int64),
            weights=frozen(weights[:, cut], np.float32),
            first_position=step.position - n + 1,
            scoring=str(entry["scoring"]),
        )
        out.append(replace(step, routing=routing))
        start += n
    return tuple(out)
