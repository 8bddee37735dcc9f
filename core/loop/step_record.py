"""A step's record: what the loop keeps of one forward pass and one sampled token.

The loop (:class:`llm_lens.core.loop.engine.Run`) captures a pass with hooks and samples from
its logits; this turns the capture, the logits and the sampler's stages into a frozen
:class:`~llm_lens.core.records.StepRecord` of read-only numpy arrays, the only thing that leaves
the model thread. The step's timing is filled in by the loop afterwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from llm_lens.core import kvcache, sampling
from llm_lens.core import logits as logits_stage
from llm_lens.core.experts import routing_of
from llm_lens.core.kvcache.measure import no_cache_stats
from llm_lens.core.loop.capture import Capture
from llm_lens.core.records import ModelInfo, StepRecord, StepTiming, frozen

if TYPE_CHECKING:
    from llm_lens.core.loop.engine import Run


def attention_row(info: ModelInfo, cap: Capture, position: int) -> np.ndarray:
    """(layers, heads, position + 1): the new query's probabilities as the model's attention
    function computed them. A windowed layer's keys are the last ones, so its row is placed
    at their positions (zero before the window); a layer not recorded stays zero, and so do
    the heads past a layer's own count (``ModelInfo.layer_heads``: Inkling's differ)."""
    out = np.zeros((info.num_layers, info.num_heads, position + 1), np.float32)
    for layer, row in enumerate(cap.attn_rows):
        if row is not None:
            kv = min(row.shape[-1], position + 1)
            out[layer, : row.shape[0], position + 1 - kv :] = row[:, -kv:].cpu().numpy()
    return out


def step_record(
    run: Run,
    cap: Capture,
    logits: Any,
    stages: list[sampling.StageResult],
    token_id: int,
    position: int,
    context: list[int],
    kv_before: int,
) -> StepRecord:
    """The record of ``run``'s next step: ``token_id`` chosen from ``logits`` (vocab,) after
    ``stages``, at ``position``, with ``context`` the ids so far and ``kv_before`` the cache's
    bytes before this pass; its timing is zero until the loop sets it."""
    eng = run.engine
    top_n = run.config.top_n
    read = logits_stage.read_logits(logits, token_id, top_n)
    hidden, updates = cap.last_position()
    return StepRecord(
        run_id=run.run_id,
        index=len(run.steps),
        position=position,
        token=eng.texts.info(token_id),
        prob=read.prob,
        logprob=read.logprob,
        rank=read.rank,
        entropy=read.entropy,
        logits=read.logits,
        top_ids=read.top_ids,
        top_logits=read.top_logits,
        top_probs=read.top_probs,
        top_texts=tuple(eng.texts.text(int(i)) for i in read.top_ids),
        stages=sampling.summarize(stages, top_n),
        attention=frozen(attention_row(eng.info, cap, position)),
        hidden=frozen(hidden.float().cpu().numpy()),
        attn_update=frozen(updates.float().cpu().numpy()),
        kv=kvcache.measure(run.cache, eng.info, kv_before)
        if eng.keeps_cache
        else no_cache_stats(eng.info, position + 1),
        timing=StepTiming(0.0, 0.0, 0.0),
        context_ids=frozen(context, np.int64),
        routing=routing_of(cap, position),
    )
