"""Writing ``.llmlens`` sessions: plan every array first (so the size is known before any
byte is written), then write a temporary file beside the target and rename it.
"""

from __future__ import annotations

import hashlib
import math
import os
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_lens.core.fileio import PathError, atomic_write
from llm_lens.core.records import frozen
from llm_lens.core.sessions import routing as routing_arrays
from llm_lens.core.sessions.compact import (
    encode_weights,
    kept_ids,
    lower_triangle,
    tail_histogram,
)
from llm_lens.core.sessions.explained import PREFIX as EXPLAINED
from llm_lens.core.sessions.format import (
    COMPACT_ARRAYS,
    COMPRESS_LEVEL,
    FORMAT,
    MANIFEST,
    PARTS,
    STAGE_ARRAYS,
    STORED_KINDS,
    Session,
    SessionError,
    SessionRun,
    check_limits,
)
from llm_lens.core.sessions.manifest import manifest_json, prompt_json, step_json

_HALF_MAX = float(np.finfo(np.float16).max)


@dataclass(frozen=True)
class _Member:
    """One ``.npy`` member: known shape and dtype, built only when written (one at a time)."""

    name: str
    part: str
    dtype: str
    shape: tuple[int, ...]
    build: Callable[[], np.ndarray]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


def _half_or_full(arrays: Sequence[np.ndarray]) -> str:
    """float16 unless a value would overflow it (then float32, so nothing turns into inf)."""
    # the largest magnitude from the max and min: no |a| copy (585 MB for a full context's
    # prefill); NaN compares False either way, so it keeps float32
    fits = all(a.size == 0 or -_HALF_MAX <= float(a.min()) and float(a.max()) <= _HALF_MAX
               for a in arrays)  # fmt: skip
    return "float16" if fits else "float32"


def _pack(
    prefix: str, arrays: list[np.ndarray], part: str, dtype: str
) -> tuple[dict[str, str], list[_Member]]:
    """Stack arrays of one shape; otherwise keep the longest (``prefix`` layout: each is a
    prefix of it) or concatenate along the last axis (``concat``), with a lengths array."""
    data = f"{prefix}.npy"
    dtype = _half_or_full(arrays) if dtype == "half" else dtype
    shapes = [a.shape for a in arrays]
    if len(set(shapes)) == 1:
        stacked = _Member(data, part, dtype, (len(arrays), *shapes[0]), lambda: np.stack(arrays))
        return {"layout": "stacked", "data": data}, [stacked]
    if len({s[:-1] for s in shapes}) != 1:
        raise ValueError(f"{prefix}: arrays of a run differ in more than their last axis")
    lengths = frozen([s[-1] for s in shapes], np.int64)
    longest = arrays[int(lengths.argmax())]
    if longest.ndim == 1 and all(np.array_equal(a, longest[: len(a)]) for a in arrays):
        member = _Member(data, part, dtype, longest.shape, lambda: longest)
        layout = "prefix"
    else:
        shape = (*shapes[0][:-1], int(lengths.sum()))
        member = _Member(data, part, dtype, shape, lambda: np.concatenate(arrays, axis=-1))
        layout = "concat"
    lens = _Member(f"{prefix}.lengths.npy", "other", "int64", lengths.shape, lambda: lengths)
    return {"layout": layout, "data": data, "lengths": lens.name}, [member, lens]


class _Pool:
    """Whole arrays of a file, each stored once: runs that share a prefill, prompt maps or the
    vocabulary projection point at one member (equal content, found by a hash)."""

    def __init__(self) -> None:
        self.members: list[_Member] = []
        self._by_content: dict[tuple[str, tuple[int, ...], bytes], str] = {}
        self._by_id: dict[int, tuple[np.ndarray, bytes]] = {}

    def add(self, name: str, part: str, dtype: str, array: np.ndarray) -> str:
        """The member name under which ``array`` is stored (an earlier one if equal)."""
        dtype = _half_or_full([array]) if dtype == "half" else dtype
        key = (dtype, tuple(array.shape), self._digest(array))
        if key not in self._by_content:
            self._by_content[key] = name
            self.members.append(_Member(name, part, dtype, key[1], lambda: array))
        return self._by_content[key]

    def _digest(self, array: np.ndarray) -> bytes:
        hit = self._by_id.get(id(array))
        if hit is None or hit[0] is not array:
            # the array's own buffer: ``tobytes()`` copied it (585 MB at the full context)
            # while holding the GIL, and the window stood still for 0.4 s after such a run;
            # hashlib reads a buffer with the GIL released
            data = np.ascontiguousarray(array)
            hit = (array, hashlib.blake2b(data.data, digest_size=16).digest())
            self._by_id[id(array)] = hit
        return hit[1]


def _logit_columns(run: SessionRun, full: bool) -> dict[str, list[np.ndarray]]:
    """The logits as kept tokens and a tail histogram, or (``full``) whole as float16."""
    steps = run.steps
    if full:
        return {"logits": [s.logits for s in steps]}
    kept = [kept_ids(s) for s in steps]
    tails = [tail_histogram(s.logits, k) for s, k in zip(steps, kept, strict=True)]
    return {
        "logit_ids": kept,
        "logit_values": [np.asarray(s.logits)[k] for s, k in zip(steps, kept, strict=True)],
        "tail_counts": [c for c, _ in tails],
        "tail_lse": [lse for _, lse in tails],
    }


def _columns(run: SessionRun, vectors: bool, full: bool) -> dict[str, list[np.ndarray]]:
    """Format 3's per-step arrays of a run (core.sessions.compact), by field."""
    steps = run.steps
    columns: dict[str, list[np.ndarray]] = {
        **_logit_columns(run, full),
        "top_ids": [s.top_ids for s in steps],
        "top_logits": [s.top_logits for s in steps],
        "top_probs": [s.top_probs for s in steps],
        "attention": [encode_weights(s.attention) for s in steps],
        "norms": [s.norm_table() for s in steps],
        "kv_per_layer": [s.kv.per_layer for s in steps],
        "context_ids": [s.context_ids for s in steps],
    }
    if vectors and all(s.hidden.size and s.attn_update.size for s in steps):
        columns.update(hidden=[s.hidden for s in steps], attn_update=[s.attn_update for s in steps])
    return columns


def _plan_arrays(
    prefix: str, run: SessionRun, vectors: bool, full: bool
) -> tuple[dict[str, Any], list[_Member]]:
    fields: dict[str, Any] = {}
    members: list[_Member] = []
    stages = [g for s in run.steps for g in s.stages]
    data = _columns(run, vectors, full) if run.steps else {}
    columns = [(n, p, d, data[n]) for n, p, d in COMPACT_ARRAYS if n in data]
    columns += [(n, "other", d, [getattr(g, a) for g in stages]) for n, d, a in STAGE_ARRAYS]
    for name, part, dtype, arrays in columns:
        if arrays:
            fields[name], new = _pack(f"{prefix}/{name}", arrays, part, dtype)
            members += new
    return fields, members


def _plan_run(
    prefix: str, run: SessionRun, pool: _Pool, vectors: bool, full: bool = False
) -> tuple[dict[str, Any], list[_Member]]:
    fields, members = _plan_arrays(prefix, run, vectors, full)
    prefill = None
    if run.prefill is not None:
        p = run.prefill
        prefill = {
            "run_id": p.run_id,
            "hidden": pool.add(f"{prefix}/prefill_hidden.npy", "hidden", "half", p.hidden),
            "positions": pool.add(f"{prefix}/prefill_positions.npy", "other", "int64",
                                  p.positions),
        }  # fmt: skip
        if p.prompt != run.prompt:
            prefill["prompt"] = prompt_json(p.prompt)
    maps = None
    if run.prompt_attention is not None:
        codes = encode_weights(lower_triangle(run.prompt_attention))  # (layers, heads, T(T+1)/2)
        maps = pool.add(f"{prefix}/prompt_attention.npy", "attention", "uint8", codes)
    state = None
    if run.generator_state is not None:
        state = pool.add(f"{prefix}/generator_state.npy", "other", "uint8", run.generator_state)
    extras = {}
    for name, array in sorted(run.extras.items()):
        dtype = "int32" if np.issubdtype(array.dtype, np.integer) else "half"
        if name.startswith(EXPLAINED):  # attributions: as computed (float32, ids, kinds)
            dtype = array.dtype.name
        extras[name] = pool.add(f"{prefix}/extra_{name}.npy", "other", dtype, array)
    routing = _plan_routing(prefix, run, pool)
    return {
        "run_id": run.run_id, "label": run.label,
        "parent": list(run.parent) if run.parent is not None else None,
        "prompt": prompt_json(run.prompt), "params": run.params,
        "finish_reason": run.finish_reason, "steps": [step_json(s) for s in run.steps],
        "arrays": fields, "prefill": prefill, "prompt_attention": maps,
        "extras": extras, "extras_json": run.extras_json, "generator_state": state,
        **({"routing": routing} if routing is not None else {}),
    }, members  # fmt: skip


def _plan_routing(prefix: str, run: SessionRun, pool: _Pool) -> dict[str, Any] | None:
    """The run's MoE routing entry (its arrays added to the pool), None for a dense model."""
    packed = routing_arrays.pack(run.steps)
    if packed is None:
        return None
    entry, arrays = packed
    for key, dtype in routing_arrays.ARRAYS:
        entry[key] = pool.add(f"{prefix}/routing_{key}.npy", "other", dtype, arrays[key])
    return entry


def _plan(session: Session, vectors: bool = False) -> tuple[bytes, list[_Member]]:
    """The manifest (encoded) and the members it lists, nothing built yet."""
    runs, members, pool = [], [], _Pool()
    compared = {i for c in session.comparisons for i in c.runs}
    for i, run in enumerate(session.runs):
        # compared columns keep whole logits: Compare's KL over the vocabulary reads them
        entry, new = _plan_run(f"runs/{i}", run, pool, vectors, i in compared)
        runs.append(entry)
        members += new
    members += pool.members
    manifest = {
        "format": FORMAT, "app_version": session.app_version, "created": session.created,
        "model": session.model, "runs": runs, "shown": session.shown_index,
        "comparisons": [
            {"runs": list(c.runs), "shared_prefill_ms": c.shared_prefill_ms}
            for c in session.comparisons
        ],
        "arrays": {
            m.name: {"dtype": m.dtype, "shape": list(m.shape), "part": m.part} for m in members
        },
    }  # fmt: skip
    if session.engine is not None:  # which engine made the runs (never a key: see base.py)
        manifest["engine"] = session.engine
    return manifest_json(manifest), members


MEMBER_OVERHEAD = 240  # a .npy header (128) and the zip's local and central entries (~110)
MANIFEST_RATIO = 0.2  # the JSON manifest deflates to about a fifth (0.12-0.2 measured)
INTEGER_RATIO = 0.5  # integer arrays (ids, byte counts) deflate to a half or less
CODE_RATIO = 0.65  # uint8 attention codes deflate to about two thirds (0.6-0.7 measured)


def estimate_size(session: Session, vectors: bool = False) -> dict[str, int]:
    """Bytes of the file per part (attention, logits, hidden, other) and ``total``.

    Float members are stored uncompressed, so their bytes are exact; the manifest and integer
    arrays are deflated, estimated by their usual ratios (a small part of any real file).
    """
    return _sizes(*_plan(session, vectors))


def _sizes(manifest: bytes, members: list[_Member]) -> dict[str, int]:
    sizes = dict.fromkeys(PARTS, 0)
    sizes["other"] += int(len(manifest) * MANIFEST_RATIO)
    for m in members:
        ratio = 1.0 if _stored(m) else CODE_RATIO if m.dtype == "uint8" else INTEGER_RATIO
        sizes[m.part] += int(m.nbytes * ratio) + MEMBER_OVERHEAD
    sizes["total"] = sum(sizes.values())
    return sizes


def _stored(member: _Member) -> bool:
    return np.dtype(member.dtype).kind in STORED_KINDS


class SaveCancelled(SessionError):
    """The save was cancelled through its progress callback; the previous file is untouched."""


Progress = Callable[[int, int], bool | None]  # (bytes written, bytes in all) -> False: cancel


def save_session(
    path: str | os.PathLike[str],
    session: Session,
    progress: Progress | None = None,
    vectors: bool = False,
    planned: Callable[[dict[str, int]], None] | None = None,
) -> int:
    """Write ``session`` to ``path`` atomically (temporary file beside it, then a rename).

    Returns the bytes written. ``progress(done, total)`` is called after each array (uncompressed
    bytes); returning False cancels (:class:`SaveCancelled`). On any failure or cancel the
    previous file is untouched and no temporary file is left behind. ``vectors`` keeps the
    residual-stream vectors beside their norms; ``planned(sizes)`` gets :func:`estimate_size`'s
    answer before anything is written.
    """
    path = Path(path)
    manifest, members = _plan(session, vectors)
    if planned is not None:
        planned(_sizes(manifest, members))
    try:
        check_limits([(m.name, m.nbytes) for m in members])
    except SessionError as exc:
        raise SessionError(f"{path}: cannot save, {exc}") from None

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            _write_zip(f, manifest, members, progress)

    try:
        written = atomic_write(path, write)  # through a symlink, mode kept, never a device
    except PathError as exc:
        raise SessionError(str(exc)) from exc
    except OSError as exc:
        raise SessionError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    return written.stat().st_size


def _write_zip(f: Any, manifest: bytes, members: list[_Member], progress: Progress | None) -> None:
    total, done = sum(m.nbytes for m in members), 0
    with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL) as zf:
        zf.writestr(MANIFEST, manifest)
        for m in members:
            big = m.nbytes + (1 << 16) >= zipfile.ZIP64_LIMIT
            info = zipfile.ZipInfo(m.name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED if _stored(m) else zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=big) as out:
                np.save(out, np.asarray(m.build(), dtype=m.dtype), allow_pickle=False)
            done += m.nbytes
            if progress is not None and progress(done, total) is False:
                raise SaveCancelled("the save was cancelled")
