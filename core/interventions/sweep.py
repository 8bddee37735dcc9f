"""Patching sweeps (causal tracing): which places carry what makes a clean prompt's answer.

A clean prompt and a corrupted one of the same length; a metric read from the last position's
logits (the logit difference of two tokens, or one token's probability). The corrupted prompt is
re-run with one place replaced by the clean run's value, and the metric read again:

- ``residual[l, p]``: the residual stream entering layer ``l`` at position ``p``;
- ``heads[l, h]``: head ``h``'s output at layer ``l`` (its slice of the input to the attention
  output projection), at every position.

Each cell equals one forward of the corrupted prompt with that one
:class:`~llm_lens.core.interventions.ResidualPatch` (or head patch) hooked on; the sweep computes
a layer's cells in one batched forward, one row of the batch per cell.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.errors import Cancelled, PromptError
from llm_lens.core.interventions.places import out_projection
from llm_lens.core.placement import input_device

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Metric:
    """``logit[a] - logit[b]`` at the last position, or ``softmax[a]`` when ``b`` is None."""

    a: int
    b: int | None = None

    def of(self, logits: Any) -> Any:
        """(batch,) metric of last-position ``logits`` (batch, vocab)."""
        logits = logits.float()
        if self.b is None:
            return torch.softmax(logits, dim=-1)[:, self.a]
        return logits[:, self.a] - logits[:, self.b]

    @property
    def name(self) -> str:
        return "prob" if self.b is None else "logit_diff"


@dataclass(frozen=True)
class SweepResult:
    """The metric on the clean and corrupted prompts, and the two patching maps."""

    metric: Metric
    clean: float
    corrupt: float
    residual: np.ndarray  # (layers, positions) float64
    heads: np.ndarray  # (layers, heads) float64

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": {"kind": self.metric.name, "a": self.metric.a, "b": self.metric.b},
            "clean": self.clean,
            "corrupt": self.corrupt,
            "residual": self.residual.tolist(),
            "heads": self.heads.tolist(),
        }


class _Sweeper:
    """One sweep's model, prompts and the clean run's values."""

    def __init__(self, model: Any, anatomy: Anatomy, clean: list[int], corrupt: list[int]):
        if len(clean) != len(corrupt) or not clean:
            raise PromptError(
                f"the clean and corrupted prompts must have as many tokens: "
                f"{len(clean)} and {len(corrupt)}"
            )
        self.model, self.anatomy = model, anatomy
        self.heads = int(model.config.get_text_config(decoder=True).num_attention_heads)
        device = input_device(model)  # not `meta` where a device map offloaded it
        self.clean = torch.tensor([clean], device=device)  # (1, T)
        self.corrupt = torch.tensor([corrupt], device=device)  # (1, T)
        self.resid: list[Any] = []  # per layer (T, hidden): the clean residual entering it
        self.head_in: list[Any] = []  # per layer (T, heads * head_dim): out-proj inputs

    def logits(self, ids: Any) -> Any:
        out = self.model(input_ids=ids, use_cache=False, logits_to_keep=1)
        return out.logits[:, -1]  # (batch, vocab)

    def record_clean(self) -> Any:
        """The clean run's last logits, keeping its residual and head inputs at every layer."""
        handles = []
        for i, layer in enumerate(self.anatomy.layers):
            handles.append(layer.register_forward_pre_hook(partial(self._keep, self.resid, i),
                                                           with_kwargs=True))  # fmt: skip
            proj = out_projection(self.anatomy, i)
            handles.append(proj.register_forward_pre_hook(partial(self._keep_in, i)))
        try:
            return self.logits(self.clean)
        finally:
            for h in handles:
                h.remove()

    def _keep(self, store: list[Any], _i: int, _m: Any, args: Any, kwargs: Any) -> None:
        store.append((args[0] if args else kwargs["hidden_states"])[0].clone())

    def _keep_in(self, _i: int, _m: Any, args: Any) -> None:
        self.head_in.append(args[0][0].clone())

    def residual_row(self, layer: int) -> Any:
        """Layer ``layer``'s cells: batch row p has position p's residual patched."""
        seq = self.clean.shape[1]
        rows = torch.arange(seq)

        def patch(_m: Any, args: Any, kwargs: Any) -> Any:
            h = (args[0] if args else kwargs["hidden_states"]).clone()  # (T, T, hidden)
            h[rows, rows] = self.resid[layer][rows].to(h.dtype)
            return ((h, *args[1:]), kwargs) if args else (args, kwargs | {"hidden_states": h})

        hook = self.anatomy.layers[layer].register_forward_pre_hook(patch, with_kwargs=True)
        try:
            return self.logits(self.corrupt.expand(seq, -1))
        finally:
            hook.remove()

    def head_row(self, layer: int) -> Any:
        """Layer ``layer``'s cells: batch row h has head h's output patched at every position."""
        clean = self.head_in[layer]  # (T, heads * head_dim)

        def patch(_m: Any, args: Any) -> Any:
            x = args[0]  # (heads, T, heads * head_dim)
            x = x.reshape(*x.shape[:-1], self.heads, -1).clone()  # (heads, T, heads, head_dim)
            src = clean.reshape(clean.shape[0], self.heads, -1).to(x.dtype)  # (T, heads, hd)
            for h in range(self.heads):
                x[h, :, h] = src[:, h]
            return (x.reshape(*x.shape[:2], -1), *args[1:])

        hook = out_projection(self.anatomy, layer).register_forward_pre_hook(patch)
        try:
            return self.logits(self.corrupt.expand(self.heads, -1))
        finally:
            hook.remove()


def patching_sweep(
    model: Any,
    clean: list[int],
    corrupt: list[int],
    metric: Metric,
    anatomy: Anatomy | None = None,
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
) -> SweepResult:
    """The metric with each layer × position's residual, and each layer × head's output,
    patched from ``clean`` into ``corrupt``; ``cancel`` stops between layers (:class:`Cancelled`)
    and ``progress(done, total)`` counts the forwards."""
    s = _Sweeper(model, anatomy or Anatomy.of(model), clean, corrupt)
    layers = len(s.anatomy.layers)
    total, done = 2 + 2 * layers, 0
    resid = np.zeros((layers, len(clean)))
    heads = np.zeros((layers, s.heads))
    with torch.inference_mode():
        base = (float(metric.of(s.record_clean())[0]), float(metric.of(s.logits(s.corrupt))[0]))
        done = 2
        for layer in range(layers):
            for out, row in ((resid, s.residual_row), (heads, s.head_row)):
                if cancel is not None and cancel.is_set():
                    raise Cancelled("the patching sweep was cancelled")
                out[layer] = metric.of(row(layer)).double().cpu().numpy()
                done += 1
                if progress is not None:
                    progress(done, total)
    return SweepResult(metric, base[0], base[1], resid, heads)
