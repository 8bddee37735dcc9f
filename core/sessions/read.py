"""Reading ``.llmlens`` sessions safely: no unpickling, every size checked before allocation.

The zip container is read by :mod:`~llm_lens.core.sessions.container`; this module turns its
manifest and arrays into a :class:`Session`. Writing is :mod:`~llm_lens.core.sessions.write`;
both share the layout in :mod:`~llm_lens.core.sessions.format`.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from llm_lens.core.logits import rebuild_logits
from llm_lens.core.records import (
    KVCacheStats,
    PrefillCapture,
    PromptTokens,
    StageSummary,
    StepRecord,
    StepTiming,
    TokenInfo,
    frozen,
)
from llm_lens.core.sessions.compact import decode_weights, from_lower_triangle
from llm_lens.core.sessions.container import open_zip, read_arrays, read_manifest
from llm_lens.core.sessions.format import (
    COMPACT_ARRAYS,
    KV_SCALARS,
    OPTIONAL,
    STAGE_ARRAYS,
    STEP_ARRAYS,
    STEP_SCALARS,
    TIMING_FIELDS,
    TIMING_FLAGS,
    TIMING_WAITS,
    UNREPORTED,
    Session,
    SessionComparison,
    SessionError,
    SessionRun,
    is_served,
)
from llm_lens.core.sessions.routing import unpack as unpack_routing
from llm_lens.core.sessions.validate import check_manifest, check_session


def read_session(path: str | os.PathLike[str]) -> Session:
    """Read a session file; any problem with it raises :class:`SessionError` with one line."""
    path = Path(path)
    try:
        with open_zip(path) as zf:
            manifest = read_manifest(zf)
            check_manifest(manifest)  # the whole manifest, before anything is built
            arrays = read_arrays(zf, manifest)
        session = _session(manifest, arrays)
        check_session(session)  # the arrays against the model's sizes
        return session
    except SessionError as exc:
        raise SessionError(f"{path}: {exc}") from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise SessionError(f"{path}: the file is damaged ({exc})") from None
    except OSError as exc:
        raise SessionError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (
        KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError, OverflowError
    ) as exc:  # fmt: skip
        raise SessionError(
            f"{path}: the manifest is damaged ({type(exc).__name__}: {exc})"
        ) from None


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise SessionError(message)


def _array(arrays: dict[str, np.ndarray], name: Any) -> np.ndarray:
    _need(isinstance(name, str) and name in arrays, f"array {name!r} is not in the file")
    return arrays[name]


def _unpack(
    entry: Any, arrays: dict[str, np.ndarray], count: int, dtype: str, what: str
) -> list[np.ndarray]:
    """Per-step read-only arrays back out of a stacked, prefix or concat layout."""
    if count == 0:
        return []
    _need(isinstance(entry, dict), f"the manifest has no {what} arrays")
    data = _array(arrays, entry.get("data"))
    layout = entry.get("layout")
    if layout == "stacked":
        _need(data.ndim >= 1 and data.shape[0] == count, f"{what}: shapes do not match the steps")
        return [frozen(a, dtype) for a in data]
    lengths = _array(arrays, entry.get("lengths"))
    ok = lengths.shape == (count,) and data.ndim >= 1 and bool((lengths >= 0).all())
    _need(ok, f"{what}: lengths do not match the steps")
    if layout == "prefix":
        _need(int(lengths.max()) <= data.shape[-1], f"{what}: lengths exceed the data")
        return [frozen(data[..., :n], dtype) for n in lengths]
    _need(layout == "concat", f"{what}: unknown layout {layout!r}")
    _need(int(lengths.sum()) == data.shape[-1], f"{what}: lengths do not add up to the data")
    return [frozen(a, dtype) for a in np.split(data, np.cumsum(lengths)[:-1], axis=-1)]


def _timing(t: dict[str, Any]) -> StepTiming:
    """A step's timing; the waits and their flag are optional (files written before them)."""
    parts: dict[str, Any] = {k: float(t[k]) for k in TIMING_FIELDS}
    parts.update({k: float(t.get(k, 0.0)) for k in TIMING_WAITS})
    parts.update({k: bool(t.get(k, True)) for k in TIMING_FLAGS})
    return StepTiming(**parts)


def _token(d: dict[str, Any]) -> TokenInfo:
    raw = bytes.fromhex(d["raw"])
    return TokenInfo(int(d["id"]), str(d["text"]), raw, bool(d["special"]), d["start"], d["end"])


def _prompt(d: dict[str, Any]) -> PromptTokens:
    tokens = tuple(_token(t) for t in d["tokens"])
    return PromptTokens(str(d["text"]), str(d["rendered"]), bool(d["chat"]), tokens)


def _ints(value: Any, what: str) -> list[int]:
    ok = isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)
    _need(ok, f"malformed {what}")
    return list(value)


def _by_device(value: Any) -> tuple[tuple[str, int], ...]:
    """The cache's bytes per device, [[device, bytes], ...]; absent in older files."""
    ok = isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and type(p[1]) is int
        and p[1] >= 0
        for p in value
    )  # fmt: skip
    _need(ok, "malformed kv by_device")
    return tuple((str(w), int(b)) for w, b in value)


def _kv_layers(kv: dict[str, Any]) -> dict[str, Any]:
    """Per-layer KV fields (tokens held, windows, heads held); absent in older files."""
    if "held_tokens" not in kv:
        return {}
    heads = kv.get("cached_kv_heads")
    _need(heads is None or (type(heads) is int and heads > 0), "malformed kv cached_kv_heads")
    return {
        "held_tokens": frozen(np.array(_ints(kv["held_tokens"], "kv held_tokens"), np.int64)),
        "windows": tuple(_ints(kv.get("windows", []), "kv windows")),
        "cached_kv_heads": heads,
    }


def _kv_state(kv: dict[str, Any]) -> dict[str, Any]:
    """A hybrid's constant conv/recurrent state (bytes, formula, per layer); absent in older
    files and for models without it."""
    if "state_per_layer" not in kv:
        return {}
    state, formula = kv.get("state_bytes"), kv.get("state_formula_bytes")
    _need(type(state) is int and type(formula) is int and state >= 0, "malformed kv state")
    per_layer = _ints(kv["state_per_layer"], "kv state_per_layer")
    _need(sum(per_layer) == state, "malformed kv state_per_layer")
    return {"state_bytes": state, "state_formula_bytes": formula,
            "state_per_layer": frozen(np.array(per_layer, np.int64))}  # fmt: skip


def _step(d: dict[str, Any], arr: dict[str, np.ndarray], stages: Any) -> StepRecord:
    scalars: dict[str, Any] = {k: d[k] for k in STEP_SCALARS}
    scalars |= {k: math.nan for k in UNREPORTED if scalars[k] is None}  # null: not reported
    kv = KVCacheStats(
        **{k: d["kv"][k] for k in KV_SCALARS}, per_layer=arr["kv_per_layer"],
        **_kv_layers(d["kv"]), **_kv_state(d["kv"]),
        by_device=_by_device(d["kv"].get("by_device", [])),
        no_cache=d["kv"].get("no_cache") is True,
    )  # fmt: skip
    summaries = tuple(
        StageSummary(g["name"], g["removed_mass"], g["kept"], g["entropy"], *next(stages))
        for g in d["stages"]
    )
    return StepRecord(
        **scalars,
        token=_token(d["token"]),
        logits=_exact_top(arr["logits"], arr["top_ids"], arr["top_logits"]),
        top_ids=arr["top_ids"],
        top_logits=arr["top_logits"],
        top_probs=arr["top_probs"],
        attention=arr["attention"],
        top_texts=tuple(str(t) for t in d["top_texts"]),
        stages=summaries,
        hidden=arr["hidden"],
        attn_update=arr["attn_update"],
        kv=kv,
        timing=_timing(d["timing"]),
        context_ids=arr["context_ids"],
        finish_reason=d["finish_reason"],
        norms=None if "norms" not in arr or arr["hidden"].size else arr["norms"],
        tail_levels=int(arr.get("tail_levels", 0)),
        approximate=bool(d.get("approximate", False)),
    )


def _exact_top(logits: np.ndarray, top_ids: np.ndarray, top_logits: np.ndarray) -> np.ndarray:
    """Float16 logits (format 2) with the top N put back exactly as the model computed them,
    so sampling from a saved step reads the same numbers where the probability mass is."""
    _need(logits.ndim == 1 and top_ids.shape == top_logits.shape and top_ids.ndim == 1,
          "logits: shapes do not match the top ids")  # fmt: skip
    if logits.size == 0:  # a served run: only the top N the server returned (check_session)
        return frozen(logits)
    _need(top_ids.size == 0 or 0 <= int(top_ids.min()) <= int(top_ids.max()) < logits.size,
          "logits: top ids out of range")  # fmt: skip
    out = np.array(logits, np.float32)
    out[top_ids] = top_logits
    return frozen(out)


_LOADED = {"half": "float32", "int32": "int64"}  # what format 3's stored dtypes load as


def _compact(fields: Any, arrays: dict[str, np.ndarray], n: int, vocab: int) -> dict[str, Any]:
    """Format 3's per-step arrays turned back into format 2's fields (core.sessions.compact)."""
    _need(isinstance(fields, dict), "the manifest has no step arrays")
    col = {
        name: _unpack(fields.get(name), arrays, n, _LOADED.get(dtype, dtype), name)
        for name, _, dtype in COMPACT_ARRAYS
        if name not in OPTIONAL or name in fields
    }
    logits = col.get("logits") or [
        rebuild_logits(vocab, np.asarray(k, np.int64), v, c, t)
        for k, v, c, t in zip(col["logit_ids"], col["logit_values"], col["tail_counts"],
                              col["tail_lse"], strict=True)
    ]  # fmt: skip
    tail = [0] * n if "logits" in col else [vocab - len(k) for k in col["logit_ids"]]
    _need(all(m.ndim == 2 and m.shape[0] == 4 for m in col["norms"]), "norms: bad shape")
    layers = [m.shape[1] for m in col["norms"]]
    empty = [(frozen(np.zeros((t, 0), np.float32)), frozen(np.zeros((t - 1, 0), np.float32)))
             for t in layers]  # fmt: skip
    return {
        "logits": logits,
        "tail_levels": tail,
        "attention": [frozen(decode_weights(a)) for a in col["attention"]],
        "hidden": col.get("hidden", [h for h, _ in empty]),
        "attn_update": col.get("attn_update", [a for _, a in empty]),
        **{k: col[k] for k in ("top_ids", "top_logits", "top_probs", "kv_per_layer",
                                "context_ids", "norms")},
    }  # fmt: skip


def _steps(
    d: dict[str, Any], arrays: dict[str, np.ndarray], version: int, vocab: int
) -> tuple[StepRecord, ...]:
    steps, fields = d["steps"], d["arrays"]
    n, n_stages = len(steps), sum(len(s["stages"]) for s in steps)
    if version >= 3:
        per = _compact(fields, arrays, n, vocab) if n else {}
    else:
        per = {
            name: _unpack(fields.get(name), arrays, n, dtype, name)
            for name, _, _, dtype, _ in STEP_ARRAYS
        }
    stage_columns = [
        _unpack(fields.get(f), arrays, n_stages, "int64" if t.startswith("int") else t, f)
        for f, t, _ in STAGE_ARRAYS
    ]
    stages = zip(*stage_columns, strict=True)
    return tuple(_step(s, {k: v[i] for k, v in per.items()}, stages) for i, s in enumerate(steps))


def _run(d: dict[str, Any], arrays: dict[str, np.ndarray], version: int, vocab: int) -> SessionRun:
    prompt = _prompt(d["prompt"])
    prefill, p = None, d["prefill"]
    if p is not None:
        hidden = frozen(_array(arrays, p["hidden"]), np.float32)
        positions = frozen(_array(arrays, p["positions"]), np.int64)
        own = _prompt(p["prompt"]) if "prompt" in p else prompt
        prefill = PrefillCapture(int(p["run_id"]), own, hidden, positions)
    maps = d["prompt_attention"]
    parent = d["parent"]
    state = d.get("generator_state")  # added within version 1: absent in older files
    generator_state = None if state is None else _array(arrays, state)
    _need(
        generator_state is None
        or (generator_state.dtype == np.uint8 and generator_state.ndim == 1),
        "malformed generator state",
    )
    run = SessionRun(
        run_id=int(d["run_id"]),
        label=str(d["label"]),
        parent=(int(parent[0]), int(parent[1])) if parent is not None else None,
        prompt=prompt,
        params=dict(d["params"]),
        finish_reason=d["finish_reason"],
        steps=unpack_routing(d.get("routing"), arrays, _steps(d, arrays, version, vocab)),
        prefill=prefill,
        prompt_attention=_maps(arrays, maps, version, len(prompt)),
        extras={str(k): _array(arrays, v) for k, v in _mapping(d.get("extras")).items()},
        extras_json=_mapping(d.get("extras_json")),
        generator_state=generator_state,
    )
    _check_interventions(run)
    return run


def _check_interventions(run: SessionRun) -> None:
    """A recorded run's interventions must read back as interventions (one line if not)."""
    from llm_lens.core.interventions import InterventionError

    try:
        run.interventions  # noqa: B018 (read to check)
    except (InterventionError, TypeError, AttributeError, ValueError) as exc:
        _need(False, f"malformed interventions of run {run.run_id}: {exc}")


def _maps(arrays: dict[str, np.ndarray], name: Any, version: int, t: int) -> np.ndarray | None:
    """The prompt's attention maps (layers, heads, T, T); format 3 keeps the coded triangle."""
    if name is None:
        return None
    maps = _array(arrays, name)
    if version < 3:
        return frozen(maps, np.float32)
    want = "expected (layers, heads, T(T+1)/2) codes"
    _need(
        maps.dtype == np.uint8 and maps.ndim == 3,
        f"prompt attention has shape {maps.shape}, {want}",
    )
    return from_lower_triangle(decode_weights(maps), t)


def _mapping(value: Any) -> dict[str, Any]:
    _need(value is None or isinstance(value, dict), "malformed run extras")
    return dict(value or {})


def _comparisons(value: Any, n_runs: int) -> tuple[SessionComparison, ...]:
    _need(isinstance(value, list), "malformed comparisons")
    out = []
    for c in value:
        runs = tuple(int(i) for i in c["runs"])
        _need(len(runs) >= 2 and all(0 <= i < n_runs for i in runs), "malformed comparison")
        out.append(SessionComparison(runs, float(c["shared_prefill_ms"])))
    return tuple(out)


def _session(m: dict[str, Any], arrays: dict[str, np.ndarray]) -> Session:
    _need(isinstance(m.get("runs"), list), "the manifest lists no runs")
    version = int(str(m["format"]).partition("/")[2])
    model = dict(m["model"])
    vocab = 0 if is_served(model) else int(model["vocab_size"])  # served: no logits stored
    engine = m.get("engine")
    return Session(
        model=model,
        runs=tuple(_run(r, arrays, version, vocab) for r in m["runs"]),
        created=str(m["created"]),
        app_version=str(m["app_version"]),
        shown=int(m.get("shown", -1)),  # added within version 1
        comparisons=_comparisons(m.get("comparisons", []), len(m["runs"])),  # added within 1
        engine=dict(engine) if isinstance(engine, dict) else None,  # added within 3
    )


def load_session(path: str | os.PathLike[str]) -> Session:
    """Open a session file; raises :class:`SessionError` with one clear line if it is bad."""
    return read_session(path)
