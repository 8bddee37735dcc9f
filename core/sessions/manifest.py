"""The JSON side of a ``.llmlens`` session: a step, prompt and token as the manifest keeps them,
and the manifest as strict JSON. The arrays beside it are planned and written by
:mod:`llm_lens.core.sessions.write`; :mod:`llm_lens.core.sessions.read` reads both back.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from llm_lens.core.fileio import first_not_finite
from llm_lens.core.records import PromptTokens, StepRecord, TokenInfo
from llm_lens.core.sessions.format import (
    KV_SCALARS,
    STEP_SCALARS,
    TIMING_FIELDS,
    TIMING_FLAGS,
    TIMING_WAITS,
    UNREPORTED,
    SessionError,
)


def token_json(t: TokenInfo) -> dict[str, Any]:
    """A token as the manifest keeps it (its raw bytes as hex)."""
    return {
        "id": t.id, "text": t.text, "raw": t.raw.hex(), "special": t.special, "start": t.start,
        "end": t.end,
    }  # fmt: skip


def prompt_json(p: PromptTokens) -> dict[str, Any]:
    """A prompt as the manifest keeps it: its texts and its tokens."""
    tokens = [token_json(t) for t in p.tokens]
    return {"text": p.text, "rendered": p.rendered, "chat": p.chat, "tokens": tokens}


def step_json(s: StepRecord) -> dict[str, Any]:
    """A step's scalars, token, stages, KV and timing as the manifest keeps them; its arrays
    are members of their own (planned by :mod:`llm_lens.core.sessions.write`)."""
    d: dict[str, Any] = {k: getattr(s, k) for k in STEP_SCALARS}
    if s.logits.size == 0:  # a served step: what the server did not report is null
        d |= {k: None for k in UNREPORTED if math.isnan(d[k])}
    d["token"] = token_json(s.token)
    d["top_texts"] = list(s.top_texts)
    d["stages"] = [
        {"name": g.name, "removed_mass": g.removed_mass, "kept": g.kept, "entropy": g.entropy}
        for g in s.stages
    ]
    d["kv"] = {k: getattr(s.kv, k) for k in KV_SCALARS}
    if s.kv.held_tokens is not None:  # what each layer holds (sliding windows), if measured
        d["kv"]["held_tokens"] = [int(n) for n in s.kv.held_tokens]
        d["kv"]["windows"] = list(s.kv.windows)
        d["kv"]["cached_kv_heads"] = s.kv.cached_kv_heads
    if s.kv.state_per_layer is not None:  # a hybrid's constant conv/recurrent state
        d["kv"]["state_bytes"] = s.kv.state_bytes
        d["kv"]["state_formula_bytes"] = s.kv.state_formula_bytes
        d["kv"]["state_per_layer"] = [int(n) for n in s.kv.state_per_layer]
    if s.kv.no_cache:  # GPT-1 keeps none: the file says so, not a formula of 0 bytes
        d["kv"]["no_cache"] = True
    if s.kv.by_device:  # a model spread by a device map: the cache's bytes per device
        d["kv"]["by_device"] = [[str(w), int(b)] for w, b in s.kv.by_device]
    timing = (*TIMING_FIELDS, *TIMING_WAITS, *TIMING_FLAGS)
    d["timing"] = {k: getattr(s.timing, k) for k in timing}
    d["finish_reason"] = s.finish_reason
    if s.approximate:  # a served step's numbers come from the top alternatives alone
        d["approximate"] = True
    return d


def manifest_json(manifest: dict[str, Any]) -> bytes:
    """The manifest as strict JSON (RFC 8259). A NaN or Inf in it (a run whose numbers broke)
    refuses the save with one line naming where: a reader expects a number there, and a bare
    ``NaN`` is not JSON."""
    try:
        return json.dumps(manifest, indent=1, default=_plain, allow_nan=False).encode("ascii")
    except ValueError:
        where = first_not_finite(json.loads(json.dumps(manifest, default=_plain)))
        raise SessionError(
            f"the session holds a number that is not finite at {where}; not saved "
            "(the model's numbers broke: a session file keeps only real numbers)"
        ) from None


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a {type(value).__name__} cannot be saved in a session manifest")
