"""The JSON trace of a run: every step's token, distribution, lens, KV bytes and timing.

The schema is documented in ``docs/trace-format.md``; bump :data:`SCHEMA` on any change.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from core.analysis import logit_lens
from core.records import StepRecord

SCHEMA = "llm-lens-trace/1"


def model_dict(info: Any) -> dict[str, Any]:
    keys = (
        "name",
        "source",
        "architecture",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "hidden_size",
        "vocab_size",
        "context_length",
        "dtype",
        "device",
        "num_parameters",
        "weights_id",
    )
    return {k: getattr(info, k) for k in keys}


def step_dict(engine: Any, step: StepRecord, lens_k: int = 1) -> dict[str, Any]:
    lens = logit_lens(engine, step, k=lens_k)
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
        "logit_lens": [
            {
                "layer": layer,
                "top_id": int(lens.top_ids[layer, 0]),
                "top_text": lens.top_texts[layer][0],
                "prob": float(lens.top_probs[layer, 0]),
            }
            for layer in range(lens.top_ids.shape[0])
        ],
        "finish_reason": step.finish_reason,
    }


def run_dict(engine: Any, run: Any) -> dict[str, Any]:
    """The whole trace of a finished run as plain JSON-able data."""
    summary = run.summary()
    prompt = run.prompt
    return {
        "schema": SCHEMA,
        "model": model_dict(engine.info),
        "sampling": {
            k: getattr(run.params, k)
            for k in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed")
        }
        | {"greedy": run.params.is_greedy},
        "prompt": {
            "text": prompt.text,
            "chat": prompt.chat,
            "rendered": prompt.rendered,
            "token_ids": prompt.ids,
            "tokens": [t.text for t in prompt.tokens],
        },
        "steps": [step_dict(engine, s) for s in run.steps],
        "timing": {
            "ttft_ms": summary.ttft_ms,
            "mean_itl_ms": summary.mean_itl_ms,
            "tokens_per_s": summary.tokens_per_s,
        },
        "finish_reason": summary.finish_reason,
        "output_text": summary.output_text,
    }


def write_json(data: Any, path: str | Path) -> None:
    """Write JSON atomically: a temporary file beside the target, then a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
