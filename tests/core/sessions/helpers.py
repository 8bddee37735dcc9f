"""Checks shared by the session tests: a saved session equals the live run field by field,
and a session zip rewritten with an edited manifest or members."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from llm_lens.core.records import StepRecord
from llm_lens.core.sessions.compact import kept_ids, weight_error_bound
from llm_lens.core.sessions.format import SessionRun

HALF = {  # stored as float16; compact fields (format 3) are checked by assert_compact_step
    ("PrefillCapture", "hidden"),
}
COMPACT = ("logits", "attention", "hidden", "attn_update", "norms", "tail_levels")


def assert_compact_step(a: Any, b: Any, where: str) -> None:
    """Format 3's step fields against the live step, within the documented bounds."""
    kept = kept_ids(a)
    assert b.tail_levels == a.logits.size - kept.size > 0, where  # said, for the Sampling pane
    assert np.array_equal(b.logits[a.top_ids], a.logits[a.top_ids]), where  # exact top N
    np.testing.assert_allclose(b.logits[kept], a.logits[kept], rtol=1e-3, err_msg=where)
    lse = [float(np.logaddexp.reduce(np.asarray(x.logits, np.float64))) for x in (a, b)]
    assert abs(lse[0] - lse[1]) < 2e-3, where  # the tail's mass is kept
    assert b.attention.shape == a.attention.shape, where
    assert np.all(np.abs(b.attention - a.attention) <= weight_error_bound(a.attention) + 1e-7)
    assert b.hidden.shape == (a.hidden.shape[0], 0) and b.attn_update.shape[1] == 0, where
    np.testing.assert_allclose(b.norms, a.norm_table(), rtol=1e-6, err_msg=where)
    for name in ("residual_norms", "attn_norms", "mlp_norms", "update_norms"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-5, atol=1e-5)


def assert_same(a: Any, b: Any, where: str = "", half: bool = False) -> None:
    """Equal field by field: arrays exactly (or within float16 rounding), and read-only."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and not b.flags.writeable, where
        assert (b.dtype, b.shape) == (a.dtype, a.shape), where
        if half:
            np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-7, err_msg=where)
        else:
            assert np.array_equal(a, b), where
    elif isinstance(a, StepRecord) and b.norms is not None and a.norms is None:
        assert_compact_step(a, b, where)
        same = {f: getattr(b, f) for f in COMPACT}
        assert_same(dataclasses.replace(a, **same), b, where)
    elif isinstance(a, SessionRun) and a.prompt_attention is not None:
        assert (
            b.prompt_attention is not None and b.prompt_attention.shape == a.prompt_attention.shape
        )
        bound = weight_error_bound(a.prompt_attention) + 1e-7
        assert np.all(np.abs(b.prompt_attention - a.prompt_attention) <= bound), where
        for f in dataclasses.fields(a):
            if f.name != "prompt_attention":
                assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}", half)
    elif dataclasses.is_dataclass(a):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            flag = half or (type(a).__name__, f.name) in HALF
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}", flag)
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]", half)
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def rewrite(
    src: Path,
    dst: Path,
    edit: Any = None,
    members: dict[str, bytes] | None = None,
    drop: tuple[str, ...] = (),
    stored: bool = False,
) -> Path:
    """Copy a session zip, editing the manifest (a function) and replacing or adding members."""
    members = dict(members or {})
    with (
        zipfile.ZipFile(src) as zin,
        zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED) as zout,
    ):
        for name in zin.namelist():
            data = members.pop(name, None) or zin.read(name)
            if name == "manifest.json" and edit is not None:
                manifest = json.loads(data)
                edit(manifest)
                data = json.dumps(manifest).encode()
            if name not in drop:
                zout.writestr(name, data)
        for name, data in members.items():
            zout.writestr(zipfile.ZipInfo(name), data)
    return dst
