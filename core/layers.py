"""The layer stack: what each layer's residual stream would predict (the logit lens).

The lens passes every layer's residual through the model's own final transform (its final norm,
OPT's output projection, the unembedding, Granite's ``logits_scaling``, Gemma 2's final
soft-capping), so the last layer's row is the model's real output. Too costly for the step loop
(one unembedding of the whole vocabulary per layer), so it is derived on demand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llm_lens.core.records import StepRecord, frozen
from llm_lens.core.runtime import param_dtype


@dataclass(frozen=True)
class LensResult:
    """Logit lens at one position: final norm + unembedding applied to every layer's residual.

    Row 0 is the embedding output, row L the last layer (whose lens equals the real logits).
    """

    top_ids: np.ndarray  # (layers + 1, k) int64
    top_probs: np.ndarray  # (layers + 1, k) float32
    top_texts: tuple[tuple[str, ...], ...]
    final_id: int  # the model's real top-1 prediction


@dataclass(frozen=True)
class PromptLens:
    """Top-1 lens prediction at every (layer, prompt position)."""

    top1_ids: np.ndarray  # (layers + 1, T) int64
    top1_probs: np.ndarray  # (layers + 1, T) float32
    top1_texts: tuple[tuple[str, ...], ...]


def lens_logits(engine: Any, hidden: torch.Tensor) -> torch.Tensor:
    """(..., vocab) float32 logits of ``hidden`` (..., hidden) through the model's final transform:
    final norm, output projection (OPT), unembedding, then the config's logit scaling
    (Granite divides by ``logits_scaling``) and final soft-capping (Gemma 2)."""
    a = engine.anatomy
    x = a.final_norm(hidden)
    project_out = getattr(a.decoder, "project_out", None)
    if project_out is not None:
        x = project_out(x)
    logits: torch.Tensor = a.lm_head(x)
    cfg = engine.model.config.get_text_config(decoder=True)
    scaling = getattr(cfg, "logits_scaling", None)
    if scaling:
        logits = logits / scaling
    cap = getattr(cfg, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits.float()


def logit_lens(engine: Any, step: StepRecord, k: int = 5) -> LensResult:
    """The lens at a step's query position, in one batched product over all layers."""
    with torch.inference_mode():
        hidden = torch.from_numpy(np.array(step.hidden)).to(
            engine.device, param_dtype(engine.model)
        )
        logits = lens_logits(engine, hidden)  # (layers + 1, vocab)
        # the last layer's residual has no final norm in it yet: the lens of it is the output
        probs = torch.softmax(logits, dim=-1)
        top_p, top_i = torch.topk(probs, k, dim=-1)  # (layers + 1, k)
    ids = top_i.cpu().numpy()
    texts = tuple(tuple(engine.texts.text(int(i)) for i in row) for row in ids)
    return LensResult(
        frozen(ids, np.int64), frozen(top_p.cpu().numpy()), texts, int(step.top_ids[0])
    )


def prompt_lens(engine: Any, hidden: np.ndarray, chunk: int = 256) -> PromptLens:
    """Top-1 lens at every prompt position, chunked over positions to bound memory."""
    layers, tokens, _ = hidden.shape
    ids = np.zeros((layers, tokens), np.int64)
    probs = np.zeros((layers, tokens), np.float32)
    with torch.inference_mode():
        for start in range(0, tokens, chunk):
            h = torch.from_numpy(np.array(hidden[:, start : start + chunk]))
            logits = lens_logits(
                engine, h.to(engine.device, param_dtype(engine.model))
            )  # (L+1, c, vocab)
            p, i = torch.softmax(logits, dim=-1).max(dim=-1)
            ids[:, start : start + chunk] = i.cpu().numpy()
            probs[:, start : start + chunk] = p.cpu().numpy()
    texts = tuple(tuple(engine.texts.text(int(i)) for i in row) for row in ids)
    return PromptLens(frozen(ids), frozen(probs), texts)
