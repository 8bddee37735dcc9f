"""Why this token: direct logit attribution and gradient × input for one step of a run.

Direct logit attribution. The last layer's residual at the query position is a sum:
``h_L = embed + Σ_l attn_l + Σ_l mlp_l``, and each attention block's output is the sum of its
heads through the block's own output projection, ``attn_l = Σ_h W_O[:, h] z_h (+ bias)``. The
model's own final norm is linear once its scale is held at this step's value, and the
unembedding is linear, so the logit splits into one number per piece. A piece that does not
split (a projection bias, a norm's bias, an unembedding bias) is reported as the ``residual``.

Post-norm blocks (OLMo 2, Gemma 2/3) add ``norm(attn_l)``: an RMS norm is linear too once its
scale is held at this step's value, so each head goes through it as well. What the model does
after its unembedding (Gemma's final soft-cap) does not split: it is part of the residual and
reported on its own (``after_unembed``). Granite multiplies each branch by the layer's
``residual_multiplier`` before adding it and divides the logits by ``logits_scaling``: both
linear, so each piece carries them. A model whose layers do not add their blocks in one of
these ways is refused in one line (:func:`check_additive`).

Sliding-window layers (Mistral, Gemma 2/3's local layers) attend over the last ``window``
positions only: each head's weights are zero outside them, and the values are those the block
attended over in the pass (not the window − 1 its cache keeps afterwards).

Input attribution. Gradient × input on the input embeddings for the chosen token's
log-probability: one backward pass of the model over the step's context.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llm_lens.core.explain.flow import FlowGraph, empty_graph, flow_graph
from llm_lens.core.explain.hooks import NoSplit, out_weight
from llm_lens.core.explain.partial import ONLY_INPUTS, gradient_pass, split_refusal
from llm_lens.core.explain.trace import ContextTrace, check_additive, norm_diag, trace_context
from llm_lens.core.placement import weights_of
from llm_lens.core.records import StepRecord, frozen

INPUT_METHOD = "gradient × input (summed over embedding dims) of the token's log-probability"


@dataclass(frozen=True)
class LogitAttribution:
    """The chosen token's logit (or its difference with ``vs_id``'s) split into the pieces of
    the residual stream that wrote it, through the final norm at this step's scale."""

    token_id: int
    vs_id: int | None  # None: the logit itself, else logit(token) − logit(vs)
    logit: float  # the model's own value from this pass
    embed: float
    attn: np.ndarray  # (layers,) each attention block as a whole (its heads + its bias)
    heads: np.ndarray  # (layers, heads)
    mlp: np.ndarray  # (layers,)
    residual: float  # logit − sum: biases that do not split over pieces, and after_unembed
    norm_scale: float  # the final norm's divisor at this step, held fixed
    # the change the model makes after its unembedding (Gemma's final soft-capping), part of
    # the residual: it does not split over pieces (0 for most models)
    after_unembed: float = 0.0
    post_norm: bool = False  # the blocks' post-attention norms were held at this step's scale
    # what the model has that can leave part of the logit unsplit: any bias parameter, a final
    # soft-cap. Without either, the residual is float32 rounding, not a term of the model
    has_biases: bool = True
    has_softcap: bool = False
    # why the logit is not split (every piece left at zero, the whole logit the residual):
    # a layer that is not attention, latent attention, blocks not added as they are; "" if split
    unsplit: str = ""

    @property
    def sum(self) -> float:
        """embed + every head + every MLP (the attention blocks are their heads, not added)."""
        return float(self.embed + self.heads.sum() + self.mlp.sum())


@dataclass(frozen=True)
class InputAttribution:
    """One number per context token: how much its input embedding moved the token's log p."""

    method: str
    token_ids: np.ndarray  # (T,) int64: the context the step read
    texts: tuple[str, ...]
    values: np.ndarray  # (T,) float32
    logprob: float  # of the chosen token, from this pass


@dataclass(frozen=True)
class Explanation:
    """Everything "why this token?" shows for one step (plain fields and read-only arrays)."""

    step: int
    position: int
    token_text: str
    vs_text: str | None
    logits: LogitAttribution
    inputs: InputAttribution
    graph: FlowGraph
    timings_ms: tuple[tuple[str, float], ...]  # (stage, ms) as measured


@torch.no_grad()
def frozen_norm_direction(norm: Any, h: torch.Tensor, d: torch.Tensor) -> tuple[Any, float]:
    """The direction e with ``d · norm_frozen(c) = e · c`` and the norm's scale at ``h``.

    An RMS-type norm is elementwise ``w ⊙ x / s(x)``: its frozen diagonal is read from the
    norm itself (:func:`norm_diag`). A LayerNorm also centres: ``e`` is centred.
    """
    h = h.to(norm.weight.dtype) if hasattr(norm, "weight") else h
    if isinstance(norm, torch.nn.LayerNorm):
        sigma = torch.sqrt(h.float().var(unbiased=False) + norm.eps)
        g = d * norm.weight.float() / sigma
        return g - g.mean(), float(sigma)
    diag = norm_diag(norm, h)  # (hidden,) weight / scale
    unit = norm_diag(norm, torch.ones_like(h))  # weight / 1 (to epsilon)
    return d * diag, float((unit / diag).median())


@torch.no_grad()
def logit_attribution(engine: Any, trace: ContextTrace, vs: int | None = None) -> LogitAttribution:
    """Split the last position's logit of ``trace.target`` (minus ``vs``'s) over the pieces."""
    a, info = engine.anatomy, engine.info
    with weights_of(engine.model, a.lm_head, a.final_norm):  # loaded where offloaded
        w_u, k = a.lm_head.weight, _logit_scale(engine)
        d = (w_u[trace.target].float() - (w_u[vs].float() if vs is not None else 0.0)) * k
        d = d.to(trace.pre.device)
        e, scale = frozen_norm_direction(a.final_norm, trace.pre[-1, -1], d)
        unembedded = _unembedded(a, trace, d, vs, k)
    pre, attn = trace.pre[:, -1], trace.attn[:, -1]  # (L + 1, hidden), (L, hidden)
    mlp = pre[1:] - pre[:-1] - attn  # (L, hidden)
    last = torch.tensor([trace.pre.shape[1] - 1])
    heads = np.zeros((info.num_layers, info.num_heads), np.float32)
    for layer, block in enumerate(a.attn):
        with weights_of(engine.model, a.layers[layer]):  # one layer's weights at a time
            diag = trace.post_diag(layer, last)  # (1, hidden) or None
            e_l = e if diag is None else e * diag[0]  # through the post-norm at this scale
            w_o = out_weight(block).float()  # (hidden, heads × head_dim) on its device
            v = (w_o.t() @ e_l.to(w_o.device)).to(trace.heads_in[layer].device)  # (H × hd,)
        h = info.heads_in(layer)  # this layer's own heads; the rest of its row stays zero
        heads[layer, :h] = (v * trace.heads_in[layer]).view(h, -1).sum(-1).cpu().numpy()
    logit = float(trace.logits[trace.target] - (trace.logits[vs] if vs is not None else 0.0))
    embed = float(pre[0] @ e)
    mlp_v = (mlp @ e).cpu().numpy()
    split = embed + float(heads.sum()) + float(mlp_v.sum())
    return LogitAttribution(
        token_id=trace.target,
        vs_id=vs,
        logit=logit,
        embed=embed,
        attn=frozen((attn @ e).cpu().numpy(), np.float32),
        heads=frozen(heads),
        mlp=frozen(mlp_v, np.float32),
        residual=logit - split,
        norm_scale=scale,
        after_unembed=logit - unembedded,
        post_norm=any(n is not None for n in trace.post_norms),
        has_biases=any(name.endswith("bias") for name, _ in engine.model.named_parameters()),
        has_softcap=bool(getattr(engine.model.config.get_text_config(decoder=True),
                                 "final_logit_softcapping", None)),
    )  # fmt: skip


def _logit_scale(engine: Any) -> float:
    """The factor the model multiplies its unembedded logits by (Granite divides them by
    ``logits_scaling``: linear, so it goes into the direction; the lens reads it the same way)."""
    cfg = engine.model.config.get_text_config(decoder=True)
    scaling = getattr(cfg, "logits_scaling", None)
    return 1.0 / float(scaling) if scaling else 1.0


def _unembedded(
    a: Any, trace: ContextTrace, d: torch.Tensor, vs: int | None, k: float = 1.0
) -> float:
    """The logit (difference) straight out of the unembedding (and the linear scaling ``k``
    ``d`` already holds): one row, not the vocabulary."""
    normed = a.final_norm(trace.pre[-1, -1].to(a.lm_head.weight.dtype)).float()  # (hidden,)
    bias = getattr(a.lm_head, "bias", None)
    value = float(normed @ d)
    if bias is not None:
        value += k * float(bias[trace.target] - (bias[vs] if vs is not None else 0.0))
    return value


def input_attribution(engine: Any, trace: ContextTrace) -> InputAttribution:
    ids = trace.ids.cpu().numpy()
    logprob = float(torch.log_softmax(trace.logits, -1)[trace.target])
    return InputAttribution(
        method=INPUT_METHOD,
        token_ids=frozen(ids, np.int64),
        texts=tuple(engine.texts.text(int(i)) for i in ids),
        values=frozen(trace.grad_x_input.cpu().numpy(), np.float32),
        logprob=logprob,
    )


def explain(
    engine: Any, step: StepRecord, vs: int | None = None, floor: float = 0.01
) -> Explanation:
    """Explain ``step``'s chosen token from a fresh pass over the context the step read.

    ``floor``: the lowest edge importance the flow graph keeps (a view may prune higher).
    A model whose logit does not split over its pieces gets gradient × input and the reason
    in one line (:mod:`.partial`), not an error.
    """
    if vs is not None and not 0 <= vs < engine.info.vocab_size:
        raise ValueError(f"--vs token id {vs} is outside the vocabulary")
    t0 = time.perf_counter()
    reason = split_refusal(engine)
    if reason is None:
        try:
            trace = trace_context(engine, step.context_ids, step.token.id)
            check_additive(engine, trace)
        except NoSplit as exc:
            reason = f"{exc}; {ONLY_INPUTS}"
    if reason is not None:
        return unsplit_explanation(engine, step, vs, reason, t0)
    t1 = time.perf_counter()
    logits = logit_attribution(engine, trace, vs)
    inputs = input_attribution(engine, trace)
    t2 = time.perf_counter()
    graph = flow_graph(engine, trace, floor)
    t3 = time.perf_counter()
    ms = (("pass", t1 - t0), ("logit", t2 - t1), ("graph", t3 - t2))
    return Explanation(
        step=step.index,
        position=step.position,
        token_text=step.token.text,
        vs_text=None if vs is None else engine.texts.text(vs),
        logits=logits,
        inputs=inputs,
        graph=graph,
        timings_ms=tuple((k, v * 1e3) for k, v in ms),
    )


def unsplit_explanation(
    engine: Any, step: Any, vs: int | None, reason: str, t0: float
) -> Explanation:
    """The explanation of ``step`` without the split: gradient × input, the logit, ``reason``."""
    ids = list(step.context_ids)
    logits, gxi = gradient_pass(engine, ids, step.token.id)
    logp = float(torch.log_softmax(logits, -1)[step.token.id])
    logit = float(logits[step.token.id] - (logits[vs] if vs is not None else 0.0))
    ran = np.asarray(step.logits, np.float64)  # (vocab,) the run's, as generate() computes
    shown = float(ran[step.token.id] - (ran[vs] if vs is not None else 0.0))
    if abs(shown - logit) > 1e-3 * max(1.0, abs(shown)):  # CPM-Ant: cached ≠ uncached
        reason += (
            f" (its forward without a cache computes {logit:.4g} here, the run with its cache "
            f"{shown:.4g}, as generate() does: the gradient is of the former)"
        )
        logit = shown
    info = engine.info
    zeros = np.zeros(info.num_layers, np.float32)
    split = LogitAttribution(
        token_id=step.token.id, vs_id=vs, logit=logit, embed=0.0, attn=frozen(zeros),
        heads=frozen(np.zeros((info.num_layers, info.num_heads), np.float32)),
        mlp=frozen(zeros.copy()), residual=logit, norm_scale=0.0, unsplit=reason,
    )  # fmt: skip
    inputs = InputAttribution(
        method=INPUT_METHOD,
        token_ids=frozen(np.asarray(ids, np.int64), np.int64),
        texts=tuple(engine.texts.text(int(i)) for i in ids),
        values=frozen(gxi.cpu().numpy(), np.float32),
        logprob=logp,
    )
    return Explanation(
        step=step.index, position=step.position, token_text=step.token.text,
        vs_text=None if vs is None else engine.texts.text(vs), logits=split, inputs=inputs,
        graph=empty_graph(engine, ids),
        timings_ms=(("pass", (time.perf_counter() - t0) * 1e3),),
    )  # fmt: skip


def explanation_dict(x: Explanation, threshold: float = 0.04) -> dict[str, Any]:
    """The JSON form (``llm-lens explain --json``; documented in docs/trace-format.md)."""
    lg = x.logits
    components: list[dict[str, Any]] = [
        {"kind": "embed", "layer": None, "head": None, "value": lg.embed}
    ]
    for layer in range(len(lg.mlp)):
        components.append(
            {"kind": "attn", "layer": layer, "head": None, "value": float(lg.attn[layer])}
        )
        components += [
            {"kind": "head", "layer": layer, "head": h, "value": float(v)}
            for h, v in enumerate(lg.heads[layer])
        ]
        components.append(
            {"kind": "mlp", "layer": layer, "head": None, "value": float(lg.mlp[layer])}
        )
    return {
        "step": x.step,
        "position": x.position,
        "token": x.token_text,
        "token_id": lg.token_id,
        "vs": x.vs_text,
        "vs_id": lg.vs_id,
        "logit": lg.logit,
        "norm_scale": lg.norm_scale,
        "components": components,
        "sum": lg.sum,
        "residual": lg.residual,
        "after_unembed": lg.after_unembed,
        "post_norm": lg.post_norm,
        "unsplit": lg.unsplit,
        "input_method": x.inputs.method,
        "logprob": x.inputs.logprob,
        "input_attribution": [
            {"index": i, "text": t, "value": float(v)}
            for i, (t, v) in enumerate(zip(x.inputs.texts, x.inputs.values, strict=True))
        ],
        "graph": x.graph.as_dict(threshold),
        "timings_ms": dict(x.timings_ms),
    }
