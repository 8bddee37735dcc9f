"""The JSON trace of a run: every step's token, distribution, lens, KV bytes and timing, and
the interventions of an intervened run.

The schema is documented in ``docs/trace-format.md``; bump :data:`SCHEMA` on any change.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_lens.core.fileio import (
    atomic_write_text,
    output_target,
    stream_output,
    strict_json,
    write_stream_text,
)
from llm_lens.core.layers import LensResult, logit_lens
from llm_lens.core.records import PromptTokens, RunSummary, StepRecord

SCHEMA = "llm-lens-trace/1"


MODEL_FIELDS = (
    "name", "source", "architecture", "num_layers", "num_heads", "num_kv_heads", "head_dim",
    "hidden_size", "vocab_size", "context_length", "dtype", "device", "num_parameters",
    "weights_id", "partly_random", "placement", "quantization", "residual_note",
)  # fmt: skip
PARAM_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed")


def model_dict(info: Any) -> dict[str, Any]:
    return _model_fields(lambda k: getattr(info, k, None))


def _model_fields(get: Any) -> dict[str, Any]:
    """The trace's model record; ``placement`` as objects (module, where, bytes), [] on one
    device, and ``quantization`` "" for full-precision weights (both absent from older files)."""
    out = {k: get(k) for k in MODEL_FIELDS}
    out["placement"] = [_placed(part) for part in out["placement"] or ()]
    out["quantization"] = out["quantization"] or ""
    out["residual_note"] = out["residual_note"] or ""
    return out


def _placed(part: Any) -> dict[str, Any]:
    """One placed piece as the trace writes it, from ModelInfo's triple or a written record."""
    if isinstance(part, dict):
        return {
            "module": str(part["module"]),
            "where": str(part["where"]),
            "bytes": int(part["bytes"]),
        }
    name, where, nbytes = part
    return {"module": str(name), "where": str(where), "bytes": int(nbytes)}


def step_dict(step: StepRecord, lens: LensResult | None) -> dict[str, Any]:
    """One step of the trace; ``lens`` None writes an empty ``logit_lens`` list."""
    return {
        "index": step.index,
        "position": step.position,
        "token_id": step.token.id,
        "token_text": step.token.text,
        "token_bytes": step.token.raw.hex(),
        "prob": step.prob,
        "logprob": step.logprob,
        "rank": step.rank,
        "entropy": step.entropy,
        "top": [
            {"id": int(i), "text": t, "prob": float(p), "logit": float(lg)}
            for i, t, p, lg in zip(
                step.top_ids, step.top_texts, step.top_probs, step.top_logits, strict=True
            )
        ],
        "stages": [
            {"name": s.name, "removed_mass": s.removed_mass, "kept": s.kept, "entropy": s.entropy}
            for s in step.stages
        ],
        "elapsed_ms": step.timing.total_ms,
        "forward_ms": step.timing.forward_ms,
        "kv_cache_bytes": step.kv.bytes_total,
        "kv_formula_bytes": step.kv.formula_bytes,
        "logit_lens": [] if lens is None else lens_rows(lens),
        "finish_reason": step.finish_reason,
        "approximate": step.approximate,
    }


def lens_rows(lens: LensResult) -> list[dict[str, Any]]:
    return [
        {
            "layer": layer,
            "top_id": int(lens.top_ids[layer, 0]),
            "top_text": lens.top_texts[layer][0],
            "prob": float(lens.top_probs[layer, 0]),
        }
        for layer in range(lens.top_ids.shape[0])
    ]


def run_dict(engine: Any, run: Any) -> dict[str, Any]:
    """The whole trace of a finished run as plain JSON-able data (the lens computed now, where
    the engine has one), with the ``engine`` that made it."""
    own_lens = getattr(engine, "logit_lens", None)  # a ModelEngine's (None: it has no lens)
    lenses = [own_lens(s, 1) if own_lens else logit_lens(engine, s, k=1) for s in run.steps]
    params = {f: getattr(run.params, f) for f in PARAM_FIELDS}
    changes = getattr(run, "interventions", ())
    data = trace_dict(
        model_dict(engine.info), run.prompt, params, run.steps, lenses, run.finish_reason, changes
    )
    return data | engine_fields(engine, run)


def engine_fields(engine: Any, run: Any) -> dict[str, Any]:
    """``engine``: which engine made the run (name, model, URL without credentials), what it
    provides and, for a served run, what the server reported and the settings sent; and
    ``stop_error`` where the run stopped on an error."""
    identity = getattr(engine, "identity", None)
    if identity is None:  # the transformers Engine itself
        return {"engine": {"name": "local", "model": engine.info.name, "url": None}}
    record = identity.as_dict() | {"provides": engine.provides.as_dict()}
    record |= getattr(run, "engine_record", dict)()
    stop = getattr(run, "stop_error", None)
    return {"engine": record} | ({"stop_error": stop} if stop else {})


def saved_engine_fields(
    engine: dict[str, Any], steps: Sequence[StepRecord], stop_error: str | None = None
) -> dict[str, Any]:
    """The ``engine`` record of a run reopened from a session that another engine made: its
    saved identity (the URL without credentials) and what that engine provides (a tokens-only
    run's where its steps carry no log-probability); ``stop_error`` where it stopped on one."""
    from llm_lens.core.engines.openai.live import recorded_provides, run_provides

    provides = run_provides(recorded_provides(engine), steps)
    record = dict(engine) | ({"provides": provides.as_dict()} if provides else {})
    return {"engine": record} | ({"stop_error": stop_error} if stop_error else {})


def served_trace(
    model: dict[str, Any],
    prompt: PromptTokens,
    params: dict[str, Any],
    steps: Sequence[StepRecord],
    finish_reason: str | None,
    engine: dict[str, Any],
) -> dict[str, Any]:
    """The trace of a served run from its records (the window's export, live or reopened):
    no logit lens (a server reports no hidden states: each step's ``logit_lens`` is []) and
    ``engine`` (:func:`engine_fields` of the live run, :func:`saved_engine_fields` of a
    reopened one)."""
    lenses: list[LensResult | None] = [None] * len(steps)
    return trace_dict(model, prompt, params, steps, lenses, finish_reason) | engine


def intervention_rows(interventions: Sequence[Any]) -> list[dict[str, Any]]:
    """Each intervention as its dict (:meth:`~llm_lens.core.interventions.Intervention.to_dict`)
    with its SPEC string beside it, so a reader sees at once that the run was changed."""
    from llm_lens.core.interventions import to_spec

    return [{"spec": to_spec(i)} | i.to_dict() for i in interventions]


def trace_dict(
    model: dict[str, Any],
    prompt: PromptTokens,
    params: dict[str, Any],
    steps: Sequence[StepRecord],
    lenses: Sequence[LensResult | None],
    finish_reason: str | None,
    interventions: Sequence[Any] = (),
) -> dict[str, Any]:
    """A trace from records alone: a live run, or one reopened from a session file.
    ``interventions`` are what an intervened run changed (``[]`` in the JSON for a plain run)."""
    summary = RunSummary.of(0, prompt, steps, finish_reason)
    greedy = bool(params.get("greedy")) or params.get("temperature") == 0
    return {
        "schema": SCHEMA,
        "model": _model_fields(model.get),
        "sampling": {f: params.get(f) for f in PARAM_FIELDS} | {"greedy": greedy},
        "prompt": {
            "text": prompt.text,
            "chat": prompt.chat,
            "rendered": prompt.rendered,
            "token_ids": prompt.ids,
            "tokens": [t.text for t in prompt.tokens],
        },
        "steps": [step_dict(s, lens) for s, lens in zip(steps, lenses, strict=True)],
        "timing": {
            "ttft_ms": summary.ttft_ms,
            "mean_itl_ms": summary.mean_itl_ms,
            "tokens_per_s": summary.tokens_per_s,
        },
        "finish_reason": summary.finish_reason,
        "output_text": summary.output_text,
        "interventions": intervention_rows(interventions),
    }


def json_text(data: Any) -> str:
    """Strict JSON (RFC 8259): a NaN or Inf is written as null with its reason beside it
    (:func:`~llm_lens.core.fileio.finite_json`), never as a bare ``NaN``."""
    return strict_json(data, ensure_ascii=False, indent=1)


def emit_json(data: Any, out: str | None) -> None:
    """A command's JSON result: to the ``--out`` file (atomically; a FIFO, /dev/null or a
    terminal written into), else (or ``-``) to stdout."""
    target = output_target(out)
    if target is None:
        print(json_text(data))
    else:
        write_json(data, target)


def write_json(data: Any, path: str | Path) -> None:
    """Write JSON atomically, or into a FIFO, /dev/null or a terminal."""
    stream = stream_output(path)
    if stream is not None:
        write_stream_text(stream, json_text(data) + "\n")
    else:
        atomic_write_text(path, json_text(data))
