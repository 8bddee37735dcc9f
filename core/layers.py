"""The layer stack: what each layer's residual stream would predict (the logit lens).

The lens passes every layer's residual through the model's own tail: the model's own forward
is run with the residual put in place of its last layer's output, so whatever the model does
after its layers (its final norm, OPT's output projection, the unembedding, Granite's
``logits_scaling``, Cohere's ``logit_scale``, Falcon-H1's ``lm_head_multiplier``, Gemma 2's final
soft-capping) is its own code, with no list of families' multipliers, and the last layer's row
is the model's real output by construction. Too costly for the step loop (one unembedding of the
whole vocabulary per layer), so it is derived on demand.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llm_lens.core.placement import forwards_replaced
from llm_lens.core.records import StepRecord, frozen
from llm_lens.core.runtime import param_dtype
from llm_lens.core.streams import final_norm_fed, layer_list, streams_of


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
    """(..., vocab) float32 logits of ``hidden`` (..., hidden) through the model's own tail.

    Each residual vector is one sequence of one token, so no position attends to another: the
    model runs with only its last layer (all of them where its loop needs every one, as
    Zamba2's does), whose output is replaced by the residual, and its own forward applies
    everything after the layers."""
    rows = hidden.reshape(-1, hidden.shape[-1])  # (N, hidden)
    ids = torch.zeros((rows.shape[0], 1), dtype=torch.long, device=rows.device)  # (N, 1)
    several = streams_of(engine.anatomy).several  # then the rows are what the final norm reads
    try:
        with _lens_tail(engine.anatomy, rows[:, None, :], alone=True, streams=several):
            logits = engine.model(input_ids=ids, use_cache=False).logits  # (N, 1, vocab)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError):
        with _lens_tail(engine.anatomy, rows[:, None, :], alone=False, streams=several):
            logits = engine.model(input_ids=ids, use_cache=False).logits
    out: torch.Tensor = logits[:, -1].float().reshape(*hidden.shape[:-1], -1)
    return out


@contextmanager
def _lens_tail(anatomy: Any, residual: torch.Tensor, alone: bool, streams: bool) -> Iterator[None]:
    """The residual put where the model's tail reads it: as its last layer's output, or, where
    the residual is several parallel streams (core.streams), as its final norm's input (the
    rows are the vector the model's own tail collapsed the streams into)."""
    if not streams:
        with _last_layer_outputs(anatomy, residual, alone):
            yield
        return
    with _last_layer_outputs(anatomy, None, alone), final_norm_fed(anatomy, residual):
        yield


@contextmanager
def _last_layer_outputs(anatomy: Any, residual: torch.Tensor | None, alone: bool) -> Iterator[None]:
    """While open, the decoder's last layer's output tensor is ``residual`` (N, 1, hidden), in
    the structure the layer returns (a tensor or a tuple; its own where None); ``alone``: it
    runs no other layer."""
    holder, name = layer_list(anatomy)
    full = getattr(holder, name)
    last = full[-1]
    original = last.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if residual is None:
            return out
        if isinstance(out, tuple | list):  # GPT-1's blocks return a list
            return type(out)((_like(residual, out[0]), *out[1:]))
        return _like(residual, out)

    if alone:
        setattr(holder, name, torch.nn.ModuleList([last]))
    try:
        with forwards_replaced([(last, forward)]):  # a device map's hook kept
            yield
    finally:
        setattr(holder, name, full)


def _like(residual: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``residual`` (N, 1, hidden) in the layer output's dtype, repeated along the sequence
    where the model ran more positions than the one fed (CPM-Ant prepends a prefix of its own
    and drops it after its layers): every position the tail reads is the residual."""
    if out.dim() == 3 and out.shape[1] != residual.shape[1]:
        residual = residual.expand(-1, out.shape[1], -1)  # (N, seq, hidden)
    return residual.to(out.dtype)


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
