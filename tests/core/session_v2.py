"""A format-2 writer for tests: the layout of LLM Lens before format 3 (float16 full logits,
residual vectors and attention), so the reader's support for older files stays tested."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from llm_lens.core.sessions import write as w
from llm_lens.core.sessions.format import STAGE_ARRAYS, STEP_ARRAYS, Session


def write_format_2(path: Path, session: Session) -> Path:
    """``session`` as a ``llm-lens-session/2`` file (every array built, no progress)."""
    manifest_bytes, _ = w._plan(session)
    manifest = json.loads(manifest_bytes)
    members: list[w._Member] = []
    pool = w._Pool()
    for i, (entry, run) in enumerate(zip(manifest["runs"], session.runs, strict=True)):
        prefix, fields = f"runs/{i}", {}
        stages = [g for s in run.steps for g in s.stages]
        columns = [(n, p, d, [get(s) for s in run.steps]) for n, p, d, _, get in STEP_ARRAYS]
        columns += [(n, "other", d, [getattr(g, a) for g in stages]) for n, d, a in STAGE_ARRAYS]
        for name, part, dtype, arrays in columns:
            if arrays:
                fields[name], new = w._pack(f"{prefix}/{name}", arrays, part, dtype)
                members += new
        entry["arrays"] = fields
        if run.prompt_attention is not None:
            entry["prompt_attention"] = pool.add(
                f"{prefix}/prompt_attention.npy", "attention", "half", run.prompt_attention
            )
        if run.prefill is not None:
            p = run.prefill
            entry["prefill"]["hidden"] = pool.add(
                f"{prefix}/prefill_hidden.npy", "hidden", "half", p.hidden
            )
            entry["prefill"]["positions"] = pool.add(
                f"{prefix}/prefill_positions.npy", "other", "int64", p.positions
            )
        for name, array in sorted(run.extras.items()):
            dtype = "int32" if np.issubdtype(array.dtype, np.integer) else "half"
            entry["extras"][name] = pool.add(f"{prefix}/extra_{name}.npy", "other", dtype, array)
        if run.generator_state is not None:
            entry["generator_state"] = pool.add(
                f"{prefix}/generator_state.npy", "other", "uint8", run.generator_state
            )
    members += pool.members
    manifest["format"] = "llm-lens-session/2"
    manifest["arrays"] = {
        m.name: {"dtype": m.dtype, "shape": list(m.shape), "part": m.part} for m in members
    }
    with open(path, "wb") as f:
        w._write_zip(f, json.dumps(manifest).encode("ascii"), members, None)
    return path
