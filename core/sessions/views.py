"""Derived views recorded into a session, so every pane works from the file without the model.

At save time (with the model) the logit lens of every step, the prompt lens and the vocabulary
projection are computed once and stored as a run's ``extras``. When the file is reopened,
:class:`RecordedAnalysis` answers the panes' analysis requests from those arrays.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from llm_lens.core.attention import AttentionMap, attention_map, pool_rows
from llm_lens.core.embeddings import EmbeddingProjection, embedding_projection, hidden_paths
from llm_lens.core.interventions import hooked_for
from llm_lens.core.layers import LensResult, PromptLens, logit_lens, prompt_lens
from llm_lens.core.positions import PositionView, position_view, view_arrays, view_from_arrays
from llm_lens.core.records import frozen
from llm_lens.core.sessions.explained import find
from llm_lens.core.sessions.format import PROMPT_ATTENTION_LIMIT, SessionRun, session_from_run

LENS_K = 5


def record_analysis(
    engine: Any, run: Any, memo: dict[Any, Any] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, json) of the lens per step, the prompt lens, the vocabulary projection and the
    model's position scheme for the prompt's positions.

    ``memo`` shares work between runs saved together (branches repeat their root's prompt and
    first steps); it may hold ``"embedding_projection"``, an ``EmbeddingProjection`` already
    computed for this model.
    """
    memo = {} if memo is None else memo

    def once(key: Any, compute: Any) -> Any:
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    lenses = [
        once(("lens", s.context_ids.tobytes()), lambda s=s: logit_lens(engine, s, LENS_K))
        for s in run.steps
    ]
    arrays: dict[str, np.ndarray] = {}
    texts: dict[str, Any] = {}
    if lenses:
        arrays["lens_top_ids"] = np.stack([x.top_ids for x in lenses])  # (steps, L+1, k)
        arrays["lens_top_probs"] = np.stack([x.top_probs for x in lenses])
        texts["lens_top_texts"] = [[list(row) for row in x.top_texts] for x in lenses]
    if run.prefill is not None:
        key = ("prompt_lens", run.prefill.positions.tobytes(), tuple(run.prompt.ids))
        pl = once(key, lambda: prompt_lens(engine, run.prefill.hidden))
        arrays["prompt_lens_ids"], arrays["prompt_lens_probs"] = pl.top1_ids, pl.top1_probs
        texts["prompt_lens_texts"] = [list(row) for row in pl.top1_texts]
    projection = once("embedding_projection", lambda: embedding_projection(engine))
    arrays["embedding_coords"] = projection.coords
    arrays["embedding_components"] = projection.components
    arrays["embedding_mean"] = projection.mean
    arrays["embedding_explained"] = projection.explained
    n = len(run.prompt)
    pos_arrays, texts["positions"] = view_arrays(
        once(("positions", n), lambda: position_view(engine.model, n))
    )
    arrays.update(pos_arrays)
    return arrays, texts


def prompt_attention_maps(run: Any) -> np.ndarray | None:
    """(layers, heads, T, T) float32 prompt maps of a finished run, recomputed from its prefill.

    None when the prompt is longer than :data:`PROMPT_ATTENTION_LIMIT`, or the run has no cache
    or did not read the whole prompt itself (it started from a cached prefix).
    """
    prefill, cache, engine = run.prefill, run.cache, run.engine
    t = len(run.prompt)
    if prefill is None or cache is None or t > PROMPT_ATTENTION_LIMIT:
        return None
    if prefill.hidden.shape[1] != t or int(prefill.positions[0]) != 0:
        return None
    with hooked_for(run):  # the maps of the model the run saw (a forgotten token hidden)
        return _all_maps(engine, cache, prefill.hidden, t, run.prompt.ids)


def _all_maps(
    engine: Any, cache: Any, hidden: np.ndarray, t: int, ids: Any = None
) -> np.ndarray | None:
    info = engine.info
    out = np.zeros((info.num_layers, info.num_heads, t, t), np.float32)  # (layers, heads, T, T)
    for layer in range(info.num_layers):
        for head in range(info.num_heads):
            amap = attention_map(engine, cache, hidden, layer, head, t, ids)
            if amap is None:  # a family whose attention LLM Lens cannot record
                return None
            out[layer, head] = amap.weights
    return out


def recorded_run(
    run: Any,
    label: str | None = None,
    parent: tuple[int, int] | None = None,
    memo: dict[Any, Any] | None = None,
) -> SessionRun:
    """A finished ``core.loop.engine.Run`` with its prompt maps and derived views, ready to save
    (``memo``: see :func:`record_analysis`)."""
    memo = {} if memo is None else memo
    arrays, texts = record_analysis(run.engine, run, memo)
    key = ("prompt_attention", tuple(run.prompt.ids))
    if key not in memo:
        memo[key] = prompt_attention_maps(run)
    base = session_from_run(run, run.engine.info, label, parent, memo[key])
    return dataclasses.replace(base, extras=arrays, extras_json={**base.extras_json, **texts})


class RecordedAnalysis:
    """Answers ``Controller.request_analysis`` kinds from a saved run (None where not stored)."""

    def __init__(self, run: SessionRun) -> None:
        self.run = run
        self.extras = run.extras
        self.texts = run.extras_json

    def get(self, kind: str, args: dict[str, Any]) -> Any:
        handler = getattr(self, f"_{kind}", None)
        return None if handler is None else handler(**args)

    def _lens(self, step: int, k: int = LENS_K) -> LensResult | None:
        ids, probs = self.extras.get("lens_top_ids"), self.extras.get("lens_top_probs")
        if ids is None or probs is None or not 0 <= step < ids.shape[0]:
            return None
        texts = tuple(tuple(row[:k]) for row in self.texts["lens_top_texts"][step])
        final = int(self.run.steps[step].top_ids[0])
        return LensResult(frozen(ids[step, :, :k]), frozen(probs[step, :, :k]), texts, final)

    def _prompt_lens(self) -> PromptLens | None:
        ids, probs = self.extras.get("prompt_lens_ids"), self.extras.get("prompt_lens_probs")
        if ids is None or probs is None:
            return None
        texts = tuple(tuple(row) for row in self.texts["prompt_lens_texts"])
        return PromptLens(frozen(ids), frozen(probs), texts)

    def _attention_map(self, layer: int, head: int, max_size: int = 512) -> AttentionMap | None:
        maps = self.run.prompt_attention
        if maps is None:
            return None
        t = maps.shape[-1]
        block = max(1, -(-t // max_size))
        weights = pool_rows(np.array(maps[layer, head], np.float32), block)
        positions = np.arange(0, t, block)
        return AttentionMap(layer, head, frozen(weights), frozen(positions), frozen(positions),
                            block > 1)  # fmt: skip

    def _attention_overview(self, size: int = 32) -> np.ndarray | None:
        maps = self.run.prompt_attention
        if maps is None:
            return None
        layers, heads, t, _ = maps.shape
        block = max(1, -(-t // min(size, t)))
        out = np.zeros((layers, heads, size, size), np.float32)
        for layer in range(layers):
            for head in range(heads):
                m = pool_rows(np.array(maps[layer, head], np.float32), block)[:size, :size]
                out[layer, head, : m.shape[0], : m.shape[1]] = m
        return frozen(out)

    def _explain(self, step: int, vs: int | None = None) -> Any:
        """ "Why this token?" for ``step`` if the user computed it before saving."""
        return find(self.extras, self.texts, step, vs)

    def _embedding_projection(self) -> EmbeddingProjection | None:
        e = self.extras
        if "embedding_coords" not in e:
            return None
        return EmbeddingProjection(
            frozen(e["embedding_coords"]), frozen(e["embedding_components"]),
            frozen(e["embedding_mean"]), frozen(e["embedding_explained"]),
        )  # fmt: skip

    def _hidden_paths(self) -> Any:
        return None if self.run.prefill is None else hidden_paths(self.run.prefill.hidden)

    def _positions(self, positions: int) -> PositionView | None:
        meta = self.texts.get("positions")
        if not isinstance(meta, dict) or meta.get("positions") != positions:
            return None
        return view_from_arrays(self.extras, meta)
