"""One NDIF run: one job whose payload becomes the step records, stopping where the local loop
would (end of sequence, a stop string, the length, the context, a cancel)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from llm_lens.core.engines.ndif import records as rec
from llm_lens.core.engines.ndif.program import CaptureSpec, generate_steps
from llm_lens.core.engines.ndif.status import (
    JobStatus,
    NdifError,
    StatusCallback,
    remote_failure,
)
from llm_lens.core.experts import _scoring
from llm_lens.core.layers import LensResult
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.records import PromptTokens, RunSummary, StepRecord
from llm_lens.core.sampling import SamplingParams

if TYPE_CHECKING:
    from llm_lens.core.engines.ndif.engine import NdifEngine

_run_ids = itertools.count(1)


def generate_kwargs(params: SamplingParams, config: RunConfig, pad: int | None) -> dict[str, Any]:
    """``generate()`` keywords for the server's own sampler (seeded by the trace, see
    :mod:`~llm_lens.core.engines.ndif.program`)."""
    gen: dict[str, Any] = {"max_new_tokens": config.max_new_tokens, "pad_token_id": pad}
    if params.is_greedy:
        return gen | {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    gen |= {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p}
    gen |= {"top_k": params.top_k or None, "min_p": params.min_p or None}
    return gen | {"repetition_penalty": params.repetition_penalty}


@dataclass
class NdifRun:
    """One generation as one job; iterate it for the step records once the job has returned."""

    engine: NdifEngine
    prompt: PromptTokens
    params: SamplingParams
    config: RunConfig
    spec: CaptureSpec
    on_status: StatusCallback | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    run_id: int = field(default_factory=lambda: next(_run_ids))
    steps: list[StepRecord] = field(default_factory=list)
    lenses: list[LensResult] = field(default_factory=list)
    finish_reason: str | None = None
    payload_bytes: int = 0  # what the server sent back (tensors), for the whole run
    step_bytes: list[int] = field(default_factory=list)  # of it, each step's
    states: list[str] = field(default_factory=list)  # the job's statuses, in order
    wall_ms: float = 0.0
    lens_gap: float = 0.0  # the largest |last lens row - the model's logits| over the steps
    prefill: None = None  # the job sends back no per-position data of the prompt

    def __iter__(self) -> Iterator[StepRecord]:
        if not self.steps and self.finish_reason is None:
            if self.cancel.is_set():
                self.finish_reason = "cancelled"
                return
            self._run()
        yield from self.steps

    def run_all(self) -> list[StepRecord]:
        for _ in self:
            pass
        return self.steps

    def _run(self) -> None:
        import torch

        eng = self.engine
        ids = torch.tensor([self.prompt.ids])  # (1, T)
        gen_mask = {"attention_mask": torch.ones_like(ids)}  # one sequence, nothing padded
        pad = eng.tokenizer.pad_token_id
        gen = generate_kwargs(self.params, self.config, pad if pad is not None else -1) | gen_mask
        reinstate(eng.hf_model)
        t0 = time.perf_counter()
        backend = eng.backend(self._status)
        try:
            payloads = generate_steps(
                eng.model, eng.targets(self.spec), self.spec, ids, gen, backend=backend
            )
        except Exception as exc:
            if remote_failure(exc):
                raise NdifError(f"NDIF: {exc}".replace("\n", " ")) from exc
            raise
        self.wall_ms = (time.perf_counter() - t0) * 1e3
        self.step_bytes = [rec.payload_bytes(p) for p in payloads]
        self.payload_bytes = sum(self.step_bytes)
        self._keep(payloads)

    def _status(self, status: JobStatus) -> None:
        self.states.append(status.state)
        if self.on_status is not None:
            self.on_status(status)

    def _keep(self, payloads: list[dict[str, Any]]) -> None:
        """Records from the payloads, stopping where the local loop would stop."""
        eng, context = self.engine, list(self.prompt.ids)
        kv_before = 0
        self.lens_gap = max((float(p["lens_gap"]) for p in payloads), default=0.0)
        server_ms = sum(float(p["clock"][2] - p["clock"][0]) for p in payloads) * 1e3
        overhead = max(0.0, self.wall_ms - server_ms)  # queue, transfer, set-up: before step 0
        for index, payload in enumerate(payloads):
            timing = rec.step_timing(payload["clock"], overhead if index == 0 else 0.0)
            how = {
                "run_id": self.run_id, "index": index, "info": eng.info, "params": self.params,
                "top_n": self.spec.top_n, "heads": self.spec.heads, "kv_before": kv_before,
                "timing": timing, "routers": [n for n, _r in eng.routers],
                "scoring": _scoring(eng.routers[0][1]) if eng.routers else "softmax",
            }  # fmt: skip
            record = rec.step_record(payload, how, eng.texts, context)
            kv_before = record.kv.bytes_total
            context.append(record.token.id)
            reason = self._finish_reason(record, context)
            self.steps.append(replace(record, finish_reason=reason) if reason else record)
            self.lenses.append(rec.lens_result(payload, eng.texts, int(record.top_ids[0])))
            eng.lenses[(self.run_id, index)] = self.lenses[-1]
            if reason:
                self.finish_reason = reason
                return

    def _finish_reason(self, record: StepRecord, context: list[int]) -> str | None:
        if record.token.id in self.engine.eos_ids:
            return "eos"
        if self.config.stop_strings:
            text = self.engine.texts.join(context[len(self.prompt) :])
            if any(s and s in text for s in self.config.stop_strings):
                return "stop"
        if len(self.steps) + 1 >= self.config.max_new_tokens:
            return "length"
        if len(context) >= self.engine.info.context_length:
            return "context"
        if self.cancel.is_set():
            return "cancelled"
        return None

    def engine_record(self) -> dict[str, Any]:
        """What a trace records of this run beside the engine's identity: where it ran (no
        credentials), what it asked for, the bytes that came back and the statuses seen."""
        steps = max(1, len(self.step_bytes))
        return {
            "backend": "local simulation" if self.engine.remote == "local" else "NDIF",
            "capture": {
                "top_n": self.spec.top_n, "lens_k": self.spec.lens_k,
                "full_logits": self.spec.full_logits, "heads": [list(h) for h in self.spec.heads],
            },
            "payload_bytes": self.payload_bytes,
            "payload_bytes_per_step": self.payload_bytes // steps,
            "wall_ms": self.wall_ms,
            "lens_gap": self.lens_gap,
            "seed": self.spec.seed,
            "job_states": list(self.states),
        }  # fmt: skip

    @property
    def generated_ids(self) -> list[int]:
        return [s.token.id for s in self.steps]

    def summary(self) -> RunSummary:
        return RunSummary.of(self.run_id, self.prompt, self.steps, self.finish_reason)


def reinstate(model: Any) -> None:
    """Put nnsight's forward back on any module whose instance ``forward`` was replaced and
    then deleted since nnsight wrapped it (the local lens swaps the last layer's forward,
    :func:`llm_lens.core.layers.lens_logits`), so a model both engines share still reaches
    every module in a trace."""
    from nnsight.intervention.source import STATE, Controller

    for module in model.modules():
        state = module.__dict__.get(STATE)
        if state is not None and "forward" not in module.__dict__:
            module.__dict__["forward"] = Controller(module, state)
