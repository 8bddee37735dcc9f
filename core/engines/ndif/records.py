"""The server's per-step payload turned into the frozen records the local engine produces.

A :class:`~llm_lens.core.records.StepRecord` keeps the norms the Layer stack draws (``norms``;
``hidden`` and ``attn_update`` have no columns, as in a compact session), the top-N and the
chosen token's numbers exactly as the server computed them, and a ``(vocab,)`` logits vector:
the server's own where the run asked for the whole distribution, else the top-N and the chosen
token exact and the rest at its histogram bin's level (``tail_levels`` says how many), so the
probability mass at temperature 1 is exact and the Sampling pane can still re-sample.
The logit lens comes back computed (a :class:`~llm_lens.core.layers.LensResult` per step).
A step whose stages were computed from tail levels is marked ``approximate``; its timing is the
server's clock for that step (:func:`step_timing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from llm_lens.core import sampling
from llm_lens.core.experts import ExpertRouting
from llm_lens.core.kvcache import formula_bytes, held_tokens
from llm_lens.core.kvcache.formula import state_formula_bytes
from llm_lens.core.layers import LensResult
from llm_lens.core.logits import rebuild_logits
from llm_lens.core.records import KVCacheStats, ModelInfo, StepRecord, StepTiming, frozen
from llm_lens.core.tokens import TokenText


def payload_bytes(payload: Any) -> int:
    """Bytes of the tensors in a payload (dicts, lists and tuples of tensors), as sent back."""
    if isinstance(payload, torch.Tensor):
        return int(payload.numel() * payload.element_size())
    if isinstance(payload, dict):
        return sum(payload_bytes(v) for v in payload.values())
    if isinstance(payload, list | tuple):
        return sum(payload_bytes(v) for v in payload)
    return 0


def full_activation_bytes(info: ModelInfo, positions: int) -> int:
    """What the same step would send as whole activations: the residual stream after every
    layer and each layer's attention output at every position read, and the (vocab,) logits,
    in float32."""
    per_position = (2 * info.num_layers + 1) * info.hidden_size
    return 4 * (per_position * positions + info.vocab_size)


def step_logits(reading: dict[str, Any], vocab: int, full: Any | None) -> tuple[np.ndarray, int]:
    """(vocab,) float32 logits and how many are their tail bin's level (0: all the model's)."""
    if full is not None:
        return np.asarray(full, np.float32), 0
    ids = reading["top_ids"].long().numpy()
    values = reading["top_logits"].numpy()
    chosen = int(reading["token"]) if "token" in reading else -1
    kept = dict(zip(ids.tolist(), values.tolist(), strict=True))
    kept.setdefault(chosen, float(reading["chosen_logit"]))
    order = np.array(sorted(kept), np.int64)
    known = np.array([kept[i] for i in order.tolist()], np.float32)
    counts, lse = reading["tail_counts"].numpy(), reading["tail_lse"].numpy()
    return rebuild_logits(vocab, order, known, counts, lse), vocab - order.size


def step_timing(clock: Any, overhead_ms: float = 0.0) -> StepTiming:
    """A step's timing from the server's clock (start, forward and capture done, the token
    handed over, in seconds): the forward with the capture that ran inside it, then the
    server's sampling; ``overhead_ms`` (the job's queue and transfer, on the first step) goes
    in ``between_ms``. Off-CPU waits are not measured on the server."""
    start, ended, handed = (float(t) for t in clock)
    return StepTiming(
        forward_ms=(ended - start) * 1e3,
        sample_ms=(handed - ended) * 1e3,
        capture_ms=0.0,
        between_ms=overhead_ms,
        waits_measured=False,
    )


def formula_kv(info: ModelInfo, tokens: int, previous: int) -> KVCacheStats:
    """The cache a server holds after ``tokens`` tokens, by formula (it is not measured there)."""
    dims = info.layer_head_dims or (info.head_dim,) * info.num_layers
    per_layer = np.zeros((info.num_layers, 2), np.int64)
    for layer, dim in enumerate(dims):
        per_layer[layer] = info.num_kv_heads * dim * info.dtype_bytes * tokens
    total = formula_bytes(info, tokens) + state_formula_bytes(info)
    return KVCacheStats(
        tokens=tokens,
        bytes_total=total,
        bytes_added=total - previous,
        per_layer=frozen(per_layer),
        formula_bytes=total,
        mha_bytes=formula_bytes(info, tokens, info.num_heads) + state_formula_bytes(info),
        held_tokens=frozen(np.full(info.num_layers, held_tokens(tokens, 0), np.int64)),
    )


def routing(payload: dict[str, Any], layers: Sequence[int], last: int, scoring: str) -> Any:
    """The routers' choices at this step's positions (None for a dense model)."""
    parts = payload.get("routing")
    if not parts:
        return None
    score = torch.sigmoid if scoring == "sigmoid" else (lambda x: torch.softmax(x, dim=-1))
    probs = torch.stack([score(logits) for logits, _w, _i in parts])  # (moe, rows, experts)
    rows = probs.shape[1]
    return ExpertRouting(
        layers=frozen(list(layers), np.int64),
        probs=frozen(probs.numpy(), np.float32),
        experts=frozen(torch.stack([i for _l, _w, i in parts]).numpy(), np.int64),
        weights=frozen(torch.stack([w for _l, w, _i in parts]).numpy(), np.float32),
        first_position=last - rows + 1,
        scoring=scoring,
    )


def attention_rows(payload: dict[str, Any], info: ModelInfo, heads: Sequence[Any], kv: int) -> Any:
    """(layers, heads, kv) float32: the opened heads' rows, zero for every head not opened."""
    out = np.zeros((info.num_layers, info.num_heads, kv), np.float32)
    for layer in sorted({n for n, _h in heads}):
        rows = payload.get(f"heads{layer}")
        if rows is None:
            continue
        opened = [h for n, h in heads if n == layer]
        width = min(rows.shape[-1], kv)
        out[layer, opened, kv - width :] = rows[:, -width:].numpy()
    return frozen(out)


def lens_result(payload: dict[str, Any], texts: TokenText, final_id: int) -> LensResult:
    """The logit lens the server computed for one step."""
    ids = payload["lens_ids"].long().numpy()
    names = tuple(tuple(texts.text(int(i)) for i in row) for row in ids)
    return LensResult(frozen(ids, np.int64), frozen(payload["lens_probs"].numpy()), names, final_id)


def step_record(
    payload: dict[str, Any], how: dict[str, Any], texts: TokenText, context: list[int]
) -> StepRecord:
    """One step's record. ``how`` holds run_id, index, info, params, top_n, heads, kv_before,
    timing, routers and scoring; ``context`` is every token read, the chosen one not yet."""
    reading, info = payload["reading"], how["info"]
    token_id, position = int(payload["token"]), len(context) - 1
    logits, tail = step_logits(
        reading | {"token": payload["token"]}, info.vocab_size, payload.get("full")
    )
    top_ids = frozen(reading["top_ids"].long().numpy(), np.int64)
    top_logits = reading["top_logits"].float()
    logprob = reading["chosen_logprob"]
    stages = sampling.run_stages(torch.from_numpy(logits.copy()), [context], how["params"])
    return StepRecord(
        run_id=how["run_id"],
        index=how["index"],
        position=position,
        token=texts.info(token_id),
        prob=float(logprob.exp()),
        logprob=float(logprob),
        rank=int(reading["rank"]),
        entropy=float(reading["entropy"]),
        logits=frozen(logits),
        top_ids=top_ids,
        top_logits=frozen(top_logits.numpy()),
        top_probs=frozen(reading["top_logprobs"].exp().numpy()),
        top_texts=tuple(texts.text(int(i)) for i in top_ids),
        stages=sampling.summarize(stages, how["top_n"]),
        attention=attention_rows(payload, info, how["heads"], position + 1),
        hidden=frozen(np.zeros((info.num_layers + 1, 0), np.float32)),
        attn_update=frozen(np.zeros((info.num_layers, 0), np.float32)),
        kv=formula_kv(info, position + 1, how["kv_before"]),
        timing=how.get("timing", StepTiming(0.0, 0.0, 0.0, waits_measured=False)),
        context_ids=frozen(context, np.int64),
        norms=frozen(payload["norms"].numpy()),
        routing=routing(payload, how.get("routers", ()), position, how.get("scoring", "softmax")),
        tail_levels=tail,
        approximate=tail > 0,
    )
