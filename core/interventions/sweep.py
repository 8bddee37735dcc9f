"""Patching sweeps (causal tracing): which places carry what makes a clean prompt's answer.

A clean prompt and a corrupted one of the same length; a metric read from the last position's
logits (the logit difference of two tokens, or one token's probability). The corrupted prompt is
re-run with one place replaced by the clean run's value, and the metric read again:

- ``residual[l, p]``: the residual stream entering layer ``l`` at position ``p``;
- ``heads[l, h]``: head ``h``'s output at layer ``l`` (its slice of the input to the attention
  output projection), at every position (NaN for a layer without attention).

Each cell equals one full forward of the corrupted prompt with that one place hooked by hand (the
tests check it). The sweep gets there for a fraction of the work (:mod:`.resume`): a patch at
layer ``l``, position ``p`` runs only layers ``l``… on positions ``p``… from the corrupted run's
recorded values, and many patches share one batched forward (one row each). Where the prompts
agree (a shared start, such as a chat template's), the two runs agree too, so a residual cell
there is the corrupted run's metric without a pass, and the head passes start after it; so is a
cell whose clean value is the corrupted run's own to the bit (at layer 0, the embedding of a token
both prompts share).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from llm_lens.core.anatomy import Anatomy, query_heads_of
from llm_lens.core.errors import Cancelled, PromptError
from llm_lens.core.interventions.places import out_projection
from llm_lens.core.interventions.resume import Recording, Resumer, record
from llm_lens.core.interventions.spec import InterventionError
from llm_lens.core.placement import input_device
from llm_lens.core.streams import streams_of

Progress = Callable[[int, int], None]
CHUNK = 16  # positions patched in one forward of the residual map (one row each): the
# measured best on two threads (docs/performance.md, "Patching sweeps")


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
    heads: np.ndarray  # (layers, heads) float64, NaN where a layer has no attention

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; a NaN cell (a layer without attention) is written as null."""
        return {
            "metric": {"kind": self.metric.name, "a": self.metric.a, "b": self.metric.b},
            "clean": self.clean,
            "corrupt": self.corrupt,
            "residual": _rows(self.residual),
            "heads": _rows(self.heads),
        }


def _rows(grid: np.ndarray) -> list[list[float | None]]:
    return [[None if math.isnan(v) else float(v) for v in row] for row in grid]


class Sweep:
    """One sweep's model, prompts and recorded runs; :meth:`residual` and :meth:`heads` fill
    the two maps (the benchmark times them apart); :func:`patching_sweep` runs both."""

    def __init__(self, model: Any, anatomy: Anatomy, clean: list[int], corrupt: list[int]):
        if len(clean) != len(corrupt) or not clean:
            raise PromptError(
                f"the clean and corrupted prompts must have as many tokens: "
                f"{len(clean)} and {len(corrupt)}"
            )
        layout = streams_of(anatomy)
        if layout.several:  # Gemma 3n, DeepSeek-V4: one vector a cell has no single place
            raise InterventionError(
                f"the residual is {layout.count} parallel streams: the patching sweep patches "
                "one residual vector a cell, so it is not run for this model (a residual patch "
                "from another prompt, resid:L@P=…, puts back every stream)"
            )
        self.model, self.anatomy = model, anatomy
        self.layers = len(anatomy.layers)
        self.positions = len(clean)
        cfg = model.config.get_text_config(decoder=True)
        heads = int(getattr(cfg, "num_attention_heads", None) or 1)  # Mamba's config: none
        # per layer its own query heads (Inkling's differ); the map is the widest layer's wide
        self.own_heads = [query_heads_of(a, heads) for a in anatomy.attn]
        self.n_heads = max([heads, *self.own_heads])
        device = input_device(model)  # not `meta` where a device map offloaded it
        self.clean_ids = torch.tensor([clean], device=device)  # (1, T)
        self.corrupt_ids = torch.tensor([corrupt], device=device)  # (1, T)
        # the first position where the prompts differ: before it the two runs are the same
        pairs = enumerate(zip(clean, corrupt, strict=True))
        self.differ = next((p for p, (a, b) in pairs if a != b), len(clean))
        self.clean: Recording | None = None
        self.resumer: Resumer | None = None

    def prepare(self) -> None:
        """The two plain runs (each recorded once)."""
        if self.resumer is None:
            self.clean = record(self.model, self.anatomy, self.clean_ids)
            base = record(self.model, self.anatomy, self.corrupt_ids)
            self.resumer = Resumer(self.model, self.anatomy, self.corrupt_ids, base)

    def cells(self) -> int:
        return self.layers * (self.positions + self.n_heads)

    def residual(self, metric: Metric, each: Callable[[int], None]) -> np.ndarray:
        """The residual map; ``each(cells)`` is called after each forward with its cells
        (and first with the cells that need none)."""
        self.prepare()
        assert self.clean is not None and self.resumer is not None
        out = np.full((self.layers, self.positions), float(self._corrupt(metric)))
        # starting at 0 (a model whose layers are not all attention), one forward holds them all
        chunk = CHUNK if self.resumer.can_start_late else self.positions
        for layer in range(self.layers):
            rows = self._changed(layer)
            each(self.positions - len(rows))  # the others patch in what is already there
            for i in range(0, len(rows), chunk):
                part = rows[i : i + chunk]
                p0 = self.resumer.start(part[0])
                edit = partial(_patch_diagonal, self.clean.resid[layer], part, p0)
                logits = self.resumer.logits(layer, p0, len(part), edit)
                out[layer, part] = metric.of(logits).double().cpu().numpy()
                each(len(part))
        return out

    def _changed(self, layer: int) -> list[int]:
        """The positions where the clean residual entering ``layer`` is not the corrupted run's
        own: from the first differing token on, less those equal to the bit (at layer 0, the
        embeddings of a token both prompts share); patching any other changes nothing."""
        assert self.clean is not None and self.resumer is not None
        clean, base = self.clean.resid[layer], self.resumer.base.resid[layer]
        return [p for p in range(self.differ, self.positions) if not torch.equal(clean[p], base[p])]

    def heads(self, metric: Metric, each: Callable[[int], None]) -> np.ndarray:
        """The head map; ``each(cells)`` as for :meth:`residual`."""
        self.prepare()
        assert self.clean is not None and self.resumer is not None
        out = np.full((self.layers, self.n_heads), math.nan)
        start = self.resumer.start(min(self.differ, self.positions - 1))
        for layer in range(self.layers):
            clean = self.clean.head_in[layer]
            if clean is None:  # a layer without attention has no heads to patch
                each(self.n_heads)
                continue
            own = self.own_heads[layer]  # the heads past it stay NaN: the layer has none
            hook = partial(_patch_heads, clean[start:], own)
            handle = out_projection(self.anatomy, layer).register_forward_pre_hook(hook)
            try:
                logits = self.resumer.logits(layer, start, own, lambda h: h)
            finally:
                handle.remove()
            out[layer, :own] = metric.of(logits).double().cpu().numpy()
            each(self.n_heads)
        return out

    def _corrupt(self, metric: Metric) -> float:
        assert self.resumer is not None
        return float(metric.of(self.resumer.base.logits[None])[0])


def _patch_diagonal(clean: Any, rows: list[int], p0: int, h: Any) -> Any:
    """Batch row i of ``h`` (rows, T - p0, hidden), whose first position is ``p0``, with
    position rows[i] from ``clean``."""
    index = torch.arange(len(rows))
    h[index, torch.tensor(rows) - p0] = clean[rows].to(h.dtype)
    return h


def _patch_heads(clean: Any, heads: int, _m: Any, args: Any) -> Any:
    """Batch row h of the output projection's input with head h's slice from ``clean``."""
    x = args[0]  # (heads, seq, heads * head_dim)
    x = x.reshape(*x.shape[:-1], heads, -1).clone()  # (heads, seq, heads, head_dim)
    src = clean.reshape(clean.shape[0], heads, -1).to(x.dtype)  # (seq, heads, head_dim)
    index = torch.arange(heads)
    x[index, :, index] = src.transpose(0, 1)  # row h, every position, head h
    return (x.reshape(*x.shape[:2], -1), *args[1:])


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
    patched from ``clean`` into ``corrupt``; ``cancel`` stops between forwards
    (:class:`Cancelled`) and ``progress(done, total)`` counts the cells done."""
    sweep = Sweep(model, anatomy or Anatomy.of(model), clean, corrupt)
    done = [0]

    def each(cells: int) -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled("the patching sweep was cancelled")
        done[0] += cells
        if progress is not None and cells:
            progress(done[0], sweep.cells())

    from llm_lens.core.runtime import every_core

    # a sweep is waited on with no run streaming: every core (the batched forwards are large)
    with torch.inference_mode(), every_core():
        each(0)
        sweep.prepare()
        resid = sweep.residual(metric, each)
        heads = sweep.heads(metric, each)
        assert sweep.clean is not None
        clean_metric = float(metric.of(sweep.clean.logits[None])[0])
    return SweepResult(metric, clean_metric, sweep._corrupt(metric), resid, heads)
