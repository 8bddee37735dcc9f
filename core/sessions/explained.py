""" "Why this token?" results kept in a session: the explanations the user computed are stored
with their run (an optional section), so they show again when the file is opened without the
model.

An :class:`~llm_lens.core.explain.attribution.Explanation` is split into its arrays (run
``extras`` named ``explain{i}_{path}``, float32 and integer as computed) and the rest as JSON
(run ``extras_json["explanations"]``, one entry per explanation: ``step``, ``vs``, ``fields``).
Reading the file needs only numpy; rebuilding an explanation imports core.explain's
dataclasses (and so torch), which only the window's "Why this token?" pane asks for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from llm_lens.core.records import frozen

PREFIX = "explain"
KEY = "explanations"


def _classes() -> dict[str, type]:
    from llm_lens.core.explain.attribution import Explanation, InputAttribution, LogitAttribution
    from llm_lens.core.explain.flow import FlowGraph

    return {c.__name__: c for c in (Explanation, LogitAttribution, InputAttribution, FlowGraph)}


def _split(value: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    """JSON of ``value``; its arrays go into ``arrays`` under ``path``."""
    if isinstance(value, np.ndarray):
        arrays[path] = value
        return {"array": path, "dtype": value.dtype.name}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _split(getattr(value, f.name), f"{path}_{f.name}", arrays)
                  for f in dataclasses.fields(value)}  # fmt: skip
        return {"type": type(value).__name__, "fields": fields}
    if isinstance(value, (tuple, list)):
        return {"tuple": [_split(v, f"{path}_{i}", arrays) for i, v in enumerate(value)]}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _join(value: Any, arrays: dict[str, np.ndarray], classes: dict[str, type]) -> Any:
    if isinstance(value, dict) and "array" in value:
        return frozen(arrays[value["array"]], np.dtype(value["dtype"]))
    if isinstance(value, dict) and "type" in value:
        cls = classes[value["type"]]
        return cls(**{k: _join(v, arrays, classes) for k, v in value["fields"].items()})
    if isinstance(value, dict) and "tuple" in value:
        return tuple(_join(v, arrays, classes) for v in value["tuple"])
    return value


def store(
    explanations: dict[tuple[int, int | None], Any],
) -> tuple[dict[str, np.ndarray], list[Any]]:
    """(extras arrays, extras_json entries) of ``{(step, vs): Explanation}``."""
    arrays: dict[str, np.ndarray] = {}
    entries = []
    for i, ((step, vs), x) in enumerate(sorted(explanations.items(), key=lambda kv: str(kv[0]))):
        entries.append({"step": step, "vs": vs, "value": _split(x, f"{PREFIX}{i}", arrays)})
    return arrays, entries


def find(extras: dict[str, np.ndarray], texts: dict[str, Any], step: int, vs: Any) -> Any:
    """The stored explanation of ``step`` (against ``vs``), or None."""
    for entry in texts.get(KEY, ()):
        if isinstance(entry, dict) and entry.get("step") == step and entry.get("vs") == vs:
            try:
                return _join(entry["value"], extras, _classes())
            except (KeyError, TypeError, ValueError):
                return None  # a damaged entry: the view says it is not in the file
    return None


def with_explanations(run: Any, explanations: dict[tuple[int, Any], Any]) -> Any:
    """``run`` (a SessionRun) with ``{(step, vs): Explanation}`` added to what it keeps."""
    if not explanations:
        return run
    old = dict(run.extras_json)
    kept = {(e["step"], e["vs"]): e for e in old.get(KEY, ())}  # reopened: keep its own
    arrays, entries = store(explanations)
    used = [n[len(PREFIX) :].partition("_")[0] for n in run.extras if n.startswith(PREFIX)]
    start = 1 + max((int(u) for u in used if u.isdigit()), default=-1)
    renamed: dict[str, np.ndarray] = {}
    for e in entries:  # fresh names after any kept ones
        e["value"] = _rename(e["value"], arrays, renamed, start)
    extras = {**run.extras, **renamed}
    for e in entries:
        kept[(e["step"], e["vs"])] = e
    return dataclasses.replace(run, extras=extras, extras_json={**old, KEY: list(kept.values())})


def _rename(
    value: Any, arrays: dict[str, np.ndarray], out: dict[str, np.ndarray], shift: int
) -> Any:
    if isinstance(value, dict) and "array" in value:
        head, _, tail = value["array"][len(PREFIX) :].partition("_")
        name = f"{PREFIX}{int(head) + shift}_{tail}"
        out[name] = arrays[value["array"]]
        return {**value, "array": name}
    if isinstance(value, dict) and "fields" in value:
        fields = {k: _rename(v, arrays, out, shift) for k, v in value["fields"].items()}
        return {**value, "fields": fields}
    if isinstance(value, dict) and "tuple" in value:
        return {"tuple": [_rename(v, arrays, out, shift) for v in value["tuple"]]}
    return value
