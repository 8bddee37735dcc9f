"""The engine seam: what the step loop, the CLI trace and the panes need from a model, whoever
runs it (transformers here, an OpenAI-compatible server, NDIF).

An engine names itself (:class:`EngineIdentity`), declares which records it can fill
(:class:`Provides`), tokenizes a prompt into :class:`~llm_lens.core.records.PromptTokens` and
starts a run whose iteration yields the same frozen
:class:`~llm_lens.core.records.StepRecord` the local loop yields. A field an engine cannot fill
stays empty (a zero-size array, 0, ``None``) and :meth:`Provides.why_not` says in one line why,
and how to get it ("this server reports no attention: open the model locally or through NDIF for
maps"), so a pane draws what it has and says what it does not.

This module imports neither torch nor transformers: a remote engine does not need them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, get_args, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from llm_lens.core.records import ModelInfo, PromptTokens, RunSummary, StepRecord

if TYPE_CHECKING:  # the types only: importing them at run time would import torch
    from llm_lens.core.layers import LensResult
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import SamplingParams

Capability = Literal[
    "tokens",  # the chosen token of each step (id, text, bytes)
    "token_ids",  # real vocabulary ids (a server that returns only texts leaves ids -1)
    "logprobs",  # the chosen token's log-probability under the raw distribution
    "alternatives",  # the top-N alternatives of each step, with their log-probabilities
    "distribution",  # the whole raw distribution (StepRecord.logits over the vocabulary)
    "sampling",  # each sampling stage's distribution (StepRecord.stages), computed exactly
    "prompt_logprobs",  # a log-probability for each prompt token
    "attention",  # attention rows and maps
    "residual",  # the residual stream at each layer (StepRecord.hidden, attn_update)
    "lens",  # the logit lens over the layers
    "kv_cache",  # the KV cache's bytes per layer
    "routing",  # mixture-of-experts router choices
    "timing",  # per-step wall time (forward, sample, capture)
    "prefix_cache",  # how many prompt tokens an engine's prefix cache already held
    "interventions",  # changes to the model's computation for a run
    "branching",  # a continuation from any step's prefix
]
CAPABILITIES: tuple[str, ...] = get_args(Capability)


@dataclass(frozen=True)
class EngineIdentity:
    """Which engine made a run and of which model: what a session or trace records.

    ``url`` is where the model runs without any credentials (:func:`public_url`); None for a
    model in this process. ``model`` is the model's identity as the engine reports it (the
    server's model id, the hub id, the bundled model's name).
    """

    engine: str  # "local", "openai", "ndif"
    model: str
    url: str | None = None
    details: tuple[tuple[str, str], ...] = ()  # further facts an engine reports (server kind…)

    def as_dict(self) -> dict[str, object]:
        head: dict[str, object] = {"name": self.engine, "model": self.model, "url": self.url}
        return head | dict(self.details)


@dataclass(frozen=True)
class Provides:
    """The records an engine fills, and for each one it does not, one line: why and the remedy.

    ``top_n`` is how many alternatives a step carries (0: none; -1: the whole vocabulary).
    ``approximate`` is True when the distribution a step carries is only the alternatives an
    engine returned: entropy, rank and the sampling stages computed from it are approximate, and
    each :class:`StepRecord` says so (``approximate``). ``head_rows`` is True when the engine
    lacks whole attention maps but brings back the attention rows of the heads a run asks for
    (``RunRequest.heads``: NDIF's opened heads).
    """

    fills: frozenset[str]
    missing: Mapping[str, str] = field(default_factory=dict)
    top_n: int = 0
    approximate: bool = False
    head_rows: bool = False

    def __post_init__(self) -> None:
        unknown = (set(self.fills) | set(self.missing)) - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"unknown capabilities: {sorted(unknown)}")
        both = set(self.fills) & set(self.missing)
        if both:
            raise ValueError(f"capabilities both filled and missing: {sorted(both)}")

    def has(self, capability: str) -> bool:
        return capability in self.fills

    def why_not(self, capability: str) -> str | None:
        """None when filled; else the one line a pane shows (a default if none was given)."""
        if capability in self.fills:
            return None
        return self.missing.get(capability, f"this engine does not provide {capability}")

    def as_dict(self) -> dict[str, object]:
        """What a trace records: the capabilities filled and the lines for those missing."""
        missing = {c: self.why_not(c) for c in CAPABILITIES if c not in self.fills}
        return {
            "fills": [c for c in CAPABILITIES if c in self.fills],
            "missing": missing,
            "top_n": self.top_n,
            "approximate": self.approximate,
        }

    @classmethod
    def everything(cls) -> Provides:
        """The local transformers engine: every record, the whole distribution."""
        return cls(frozenset(CAPABILITIES), top_n=-1)


@runtime_checkable
class EngineRun(Protocol):
    """One generation: iterating yields :class:`StepRecord` s as they are made (index 0 is the
    prefill's), appended to ``steps``. ``finish_reason`` is set when it ends (``eos``, ``stop``,
    ``length``, ``context``, ``cancelled``, or ``error`` with ``stop_error`` saying what)."""

    run_id: int
    prompt: PromptTokens
    params: SamplingParams
    config: RunConfig
    steps: list[StepRecord]
    finish_reason: str | None

    def __iter__(self) -> Iterator[StepRecord]: ...

    def summary(self) -> RunSummary: ...


@runtime_checkable
class ModelEngine(Protocol):
    """A model, wherever it runs. One thread uses it at a time."""

    @property
    def identity(self) -> EngineIdentity: ...

    @property
    def provides(self) -> Provides: ...

    @property
    def info(self) -> ModelInfo: ...  # shapes as far as known (0 where the engine cannot say)

    def tokenize(
        self, text: str, chat: bool = True, system: str | None = None, parse_special: bool = False
    ) -> PromptTokens: ...

    def start(
        self,
        prompt: PromptTokens,
        params: SamplingParams,
        config: RunConfig | None = None,
        cancel: threading.Event | None = None,
    ) -> EngineRun: ...

    def logit_lens(self, step: StepRecord, k: int = 5) -> LensResult | None:
        """The lens at a step, or None where ``provides`` has no ``lens``."""
        ...


def public_url(url: str) -> str:
    """``url`` without user, password, query or fragment: what may be written to a file."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address keeps its brackets
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def empty_capture_fields(layers: int = 0) -> dict[str, object]:
    """The StepRecord fields an engine without internals leaves empty: zero-size arrays with
    the right number of axes (panes check sizes), no routing."""
    import numpy as np

    from llm_lens.core.records import frozen

    return {
        "attention": frozen(np.zeros((layers, 0, 0), np.float32)),
        "hidden": frozen(np.zeros((layers + 1, 0), np.float32)),
        "attn_update": frozen(np.zeros((layers, 0), np.float32)),
        "routing": None,
    }
