"""Sessions (``.llmlens``): the in-memory types and the file layout they share.

Sessions: runs saved whole, to reopen, replay and re-sample without the model.

A session file is a zip of ``manifest.json`` and ``.npy`` arrays, readable from a notebook with
zipfile, json and numpy alone (``docs/session-format.md``). A session file may come from anyone,
so loading never unpickles and checks every size before it allocates. No torch is imported here:
a saved session replays and re-samples on a machine without the model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from llm_lens.core.errors import LensError
from llm_lens.core.records import (
    PrefillCapture,
    PromptTokens,
    StepRecord,
    frozen,
)
from llm_lens.core.tokens import bytes_text

FORMAT_NAME = "llm-lens-session"
# 2: float16 logits (top exact), hidden states and views; shared arrays once
# 3: logits as kept tokens + a tail histogram, attention as uint8 codes, residual norms
FORMAT_VERSION = 3
FORMAT = f"{FORMAT_NAME}/{FORMAT_VERSION}"
MANIFEST = "manifest.json"
MAX_ARRAY_BYTES = 2 << 30  # one array
MAX_TOTAL_BYTES = 4 << 30  # all arrays of a session, uncompressed
MAX_MANIFEST_BYTES = 256 << 20
PROMPT_ATTENTION_LIMIT = 256  # prompt maps (layers, heads, T, T) are kept only up to this T
COMPRESS_LEVEL = 1  # integers and the manifest deflate well; level 1 is the fastest
STORED_KINDS = "f"  # float members are stored: they deflate by only a few % (float16 ~3 %)
DTYPES = frozenset(
    {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}
)
PARTS = ("attention", "logits", "hidden", "other")
INTERVENTIONS = "interventions"  # the extras_json key of an intervened run's interventions
# a model behind a server (core.engines.openai): no shapes, ids -1 where it names tokens by text
SERVED = "served"
_HALF_MAX = float(np.finfo(np.float16).max)


class SessionError(LensError):
    """A session file cannot be read or written; the message says why in one line."""


def app_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-lens")
    except PackageNotFoundError:
        return "unknown"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class SessionRun:
    """One run as saved: its prompt, settings, every step, and the prompt's per-position data."""

    run_id: int
    label: str
    parent: tuple[int, int] | None  # (run_id, step index) it branched from; None for a root run
    prompt: PromptTokens
    params: dict[str, Any]  # the SamplingParams fields
    finish_reason: str | None
    steps: tuple[StepRecord, ...]
    prefill: PrefillCapture | None = None  # hidden stored as float16, loaded as float32
    prompt_attention: np.ndarray | None = None  # (layers, heads, T, T); float16 on disk
    # derived views recorded with the model so panes work without it (core.sessions.views)
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    extras_json: dict[str, Any] = field(default_factory=dict)
    # the sampler's torch.Generator state after the last step (uint8), so a continuation of the
    # reopened run draws what the live run would have drawn next
    generator_state: np.ndarray | None = None

    @property
    def generated_ids(self) -> list[int]:
        return [s.token.id for s in self.steps]

    @property
    def interventions(self) -> tuple[Any, ...]:
        """What the run changed in the model (``core.interventions`` values; () for a plain
        run), recorded as their dicts under ``extras_json["interventions"]``."""
        from llm_lens.core.interventions import from_dict

        return tuple(from_dict(d) for d in self.extras_json.get(INTERVENTIONS, ()))

    def output_text(self) -> str:
        """The response, decoded from the bytes of its tokens (special tokens left out)."""
        raw = b"".join(s.token.raw for s in self.steps if not s.token.special)
        return bytes_text(raw)


@dataclass(frozen=True)
class SessionComparison:
    """Runs of a session that were compared side by side from one shared prefill."""

    runs: tuple[int, ...]  # indices into ``Session.runs``, in column order
    shared_prefill_ms: float


@dataclass(frozen=True)
class Session:
    """Everything a session file holds: the model's identity and one or more runs."""

    model: dict[str, Any]  # ModelInfo.as_dict(), with weights_id
    runs: tuple[SessionRun, ...]
    created: str = field(default_factory=_now)  # ISO 8601, UTC
    app_version: str = field(default_factory=app_version)
    shown: int = -1  # index of the run the app shows when the file is opened
    comparisons: tuple[SessionComparison, ...] = ()
    # which engine made the runs (EngineIdentity.as_dict(): name, model, url without
    # credentials); None for the local engine's files, which predate it
    engine: dict[str, Any] | None = None

    @property
    def served(self) -> bool:
        """The runs came from a server: the panes show only what it reported."""
        return is_served(self.model)

    @property
    def shown_index(self) -> int:
        """``shown`` as an index in ``range(len(runs))`` (the last run if out of range)."""
        return self.shown if 0 <= self.shown < len(self.runs) else len(self.runs) - 1


def is_served(model: dict[str, Any]) -> bool:
    """A manifest's model is one behind a server (its shapes 0, its arrays empty)."""
    return model.get("architecture") == SERVED


def session_from_run(
    run: Any,
    info: Any,
    label: str | None = None,
    parent: tuple[int, int] | None = None,
    prompt_attention: np.ndarray | None = None,
) -> SessionRun:
    """A :class:`SessionRun` of a finished ``core.loop.engine.Run`` (or anything with its fields).

    ``prompt_attention`` is the (layers, heads, T, T) prompt maps, for prompts of at most
    :data:`PROMPT_ATTENTION_LIMIT` tokens.
    """
    maps = None
    if prompt_attention is not None:
        t = len(run.prompt)
        expected = (info.num_layers, info.num_heads, t, t)
        if t > PROMPT_ATTENTION_LIMIT or tuple(prompt_attention.shape) != expected:
            raise ValueError(
                f"prompt attention must be {expected} with T ≤ {PROMPT_ATTENTION_LIMIT}; "
                f"got {tuple(prompt_attention.shape)}"
            )
        maps = frozen(prompt_attention, np.float32)
    params = run.params
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        params = dataclasses.asdict(params)
    generator = getattr(run, "generator", None)
    state = None if generator is None else frozen(generator.get_state().numpy(), np.uint8)
    return SessionRun(
        run_id=int(run.run_id),
        label=f"run {run.run_id}" if label is None else label,
        parent=parent,
        prompt=run.prompt,
        params=dict(params),
        finish_reason=run.finish_reason,
        steps=tuple(run.steps),
        prefill=run.prefill,
        prompt_attention=maps,
        extras_json=intervention_json(run),
        generator_state=state,
    )


def intervention_json(run: Any) -> dict[str, Any]:
    """``{"interventions": [dict, ...]}`` for an intervened run (anything with
    ``interventions``), {} for a plain one: the file says what the run changed."""
    changes = tuple(getattr(run, "interventions", ()) or ())
    return {INTERVENTIONS: [i.to_dict() for i in changes]} if changes else {}


# ---- What a run's step arrays are called in the file -------------------------------------

# (field, part, stored dtype or "half", loaded dtype, getter)
# Version 2 keeps float32 only where exactness is the claim: the top-N logits and
# probabilities (sampling reads them; the full float16 logits get the exact top N back on load).
STEP_ARRAYS: tuple[tuple[str, str, str, str, Callable[[StepRecord], np.ndarray]], ...] = (
    ("logits", "logits", "half", "float32", lambda s: s.logits),
    ("top_ids", "other", "int32", "int64", lambda s: s.top_ids),
    ("top_logits", "other", "float32", "float32", lambda s: s.top_logits),
    ("top_probs", "other", "float32", "float32", lambda s: s.top_probs),
    ("attention", "attention", "half", "float32", lambda s: s.attention),
    ("hidden", "hidden", "half", "float32", lambda s: s.hidden),
    ("attn_update", "hidden", "half", "float32", lambda s: s.attn_update),
    ("kv_per_layer", "other", "int64", "int64", lambda s: s.kv.per_layer),
    ("context_ids", "other", "int32", "int64", lambda s: s.context_ids),
)
# Format 3 (core.sessions.compact): what replaces format 2's logits, attention, hidden and
# attn_update. (field, part, stored dtype or "half", getter)
COMPACT_ARRAYS: tuple[tuple[str, str, str], ...] = (
    ("logits", "logits", "half"),  # optional, runs of a comparison: (vocab,) whole
    ("logit_ids", "logits", "int32"),  # per step (K,) ascending
    ("logit_values", "logits", "half"),  # per step (K,)
    ("tail_counts", "logits", "int32"),  # per step (TAIL_BINS,)
    ("tail_lse", "logits", "float32"),  # per step (TAIL_BINS,)
    ("top_ids", "other", "int32"),
    ("top_logits", "other", "float32"),
    ("top_probs", "other", "float32"),
    ("attention", "attention", "uint8"),  # per step (layers, heads, kv_len) codes of √w
    ("norms", "hidden", "float32"),  # per step (4, layers + 1)
    ("hidden", "hidden", "half"),  # optional (vectors kept): (layers + 1, hidden)
    ("attn_update", "hidden", "half"),  # optional: (layers, hidden)
    ("kv_per_layer", "other", "int64"),
    ("context_ids", "other", "int32"),
)
VECTORS = ("hidden", "attn_update")
OPTIONAL = (*VECTORS, "logits", "logit_ids", "logit_values", "tail_counts", "tail_lse")
STAGE_ARRAYS = (("stage_top_ids", "int32", "top_ids"), ("stage_top_probs", "float32", "top_probs"))
STEP_SCALARS = ("run_id", "index", "position", "prob", "logprob", "rank", "entropy")
# a step with no distribution (a served token the server sent no log-probability for) writes
# these as null: not reported, read back as NaN; a NaN anywhere else is still refused
UNREPORTED = ("prob", "logprob", "entropy")
KV_SCALARS = (
    "tokens", "bytes_total", "bytes_added", "formula_bytes", "mha_bytes", "device_allocated",
    "device_reserved",
)  # fmt: skip
TIMING_FIELDS = ("forward_ms", "sample_ms", "capture_ms")
# the model thread's waits (StepTiming); optional: files written before them read as 0
TIMING_WAITS = ("forward_wait_ms", "sample_wait_ms", "capture_wait_ms", "between_ms", "queue_ms")
# whether those waits were measured on the run's device; optional: files written before it read
# as measured (their zeros from a GPU then read as no waiting, as they always did)
TIMING_FLAGS = ("waits_measured",)


def check_limits(sizes: list[tuple[str, int]]) -> None:
    for name, nbytes in sizes:
        if nbytes > MAX_ARRAY_BYTES:
            raise SessionError(
                f"too large: array {name} needs {nbytes:,} bytes (limit {MAX_ARRAY_BYTES:,})"
            )
    total = sum(n for _, n in sizes)
    if total > MAX_TOTAL_BYTES:
        raise SessionError(f"too large: arrays need {total:,} bytes (limit {MAX_TOTAL_BYTES:,})")
