"""The views a pane asks for, by name, computed off the GUI thread from a run and its cache.

Each stage module holds its own maths (:mod:`~llm_lens.core.layers` for the lens,
:mod:`~llm_lens.core.attention` for maps, :mod:`~llm_lens.core.embeddings` for projections);
this is only the dispatch the worker and the session reader share.
"""

from __future__ import annotations

from typing import Any

from llm_lens.core.attention import attention_map, attention_overview
from llm_lens.core.embeddings import embedding_projection, hidden_paths, neighbours
from llm_lens.core.explain.attribution import explain
from llm_lens.core.interventions import hooked_for
from llm_lens.core.layers import logit_lens, prompt_lens
from llm_lens.core.positions import position_view


def compute(kind: str, engine: Any, run: Any, args: dict[str, Any]) -> Any:
    """One analysis by name, for a run (anything with ``steps``, ``prefill``, ``cache``).

    Returns None when the run lacks what the kind needs (no prefill yet, no KV cache for a
    recorded run). Kinds: lens, prompt_lens, attention_map, attention_overview,
    embedding_projection, hidden_paths, neighbours, positions, explain (step, vs). What reads
    the model again does so under the run's interventions (the lens reads the recorded states,
    which were made under them).
    """
    with hooked_for(run):
        return _compute(kind, engine, run, args)


def _compute(kind: str, engine: Any, run: Any, args: dict[str, Any]) -> Any:
    if kind == "embedding_projection":
        return embedding_projection(engine)
    if kind == "neighbours":
        return neighbours(engine, args["token_id"], args.get("k", 10))
    if kind == "positions":
        return position_view(engine.model, args["positions"])
    prefill = getattr(run, "prefill", None)
    if prefill is None:
        return None
    cache = getattr(run, "cache", None)
    if kind == "lens":
        return logit_lens(engine, run.steps[args["step"]], args.get("k", 5))
    if kind == "prompt_lens":
        return prompt_lens(engine, prefill.hidden)
    if kind == "hidden_paths":
        return hidden_paths(prefill.hidden)
    if kind == "explain":
        return explain(engine, run.steps[args["step"]], args.get("vs"))
    if cache is None:
        return None
    if kind == "attention_map":
        layer, head, size = args["layer"], args["head"], args.get("max_size", 512)
        ids = prefill.prompt.ids  # re-run where the residual is several streams
        return attention_map(engine, cache, prefill.hidden, layer, head, size, ids)
    if kind == "attention_overview":
        return attention_overview(engine, cache, prefill.hidden, ids=prefill.prompt.ids)
    raise ValueError(f"unknown analysis {kind!r}")


def likely_next(kind: str, args: dict[str, Any], info: Any) -> list[dict[str, Any]]:
    """The requests a person probably makes after ``kind`` with ``args``, likeliest first, for
    the worker to compute while it waits: after one head's attention map, a spin box's steps
    from it (the next layer, the next head, the previous layer, the previous head). None for
    other kinds."""
    if kind != "attention_map":
        return []
    layer, head = args["layer"], args["head"]
    steps = ((layer + 1, head), (layer, head + 1), (layer - 1, head), (layer, head - 1))
    return [
        {**args, "layer": n, "head": h}
        for n, h in steps
        if 0 <= n < info.num_layers and 0 <= h < info.heads_in(n)
    ]
