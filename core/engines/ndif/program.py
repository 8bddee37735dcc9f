"""The nnsight trace that runs on the server: one generation, every step's captures reduced there.

One ``model.generate`` trace per run (nnsight's ``tracer.all()`` loop over the generation's
steps), so the whole run is one request and one reply, not a round trip per token. Each step
returns only what the panes draw, computed where the activations are:

- the residual norms per layer (residual, attention update, MLP update, layer update), never the
  vectors;
- the logit lens top-k, through the model's own final norm, its ``project_out`` (OPT) and
  ``lm_head``, then the scaling its forward applies after the head (:data:`HEAD_SCALES`, read
  from the config by the client and sent as plain numbers), checked each step against the
  model's own logits (``lens_gap``: the last lens row less the output, 0 where they agree);
- the final layer's top-N logits, the log-sum-exp and entropy of the whole distribution, the
  chosen token's logit and rank, and a 64-bin histogram of the rest (the session format's tail,
  :mod:`llm_lens.core.sessions.compact`); the whole ``(vocab,)`` logits only when asked;
- each router's logits, weights and chosen experts at the new positions (MoE models);
- the attention row of only the heads the user opened, from the model's own rotated q and cached
  k (the inputs of its attention function, read through nnsight's ``.source``).

A step's token is chosen by the server's ``generate()``; nnsight hands it over through the
generation streamer at the start of the next step, so a step's reading of its logits is finished
then (the last step's at the streamer's final put, after which the loop stops by design). A
seeded sampled run seeds the server's torch generator at the top of the trace, before the first
draw: ``generate()`` then draws what the local sampler draws from the same seed wherever the
server samples on the CPU (the local simulation); a GPU server draws from its CUDA generator,
reproducible for a seed there but not the local engine's tokens.

Each step carries the server's clock (``clock``: the step's start, when the streamer handed
over the previous token, the end of its forward and capture, and the hand-over of its own
token), so the Timing pane has the server's time per step rather than the job's.

The trace body and its helpers use torch and the model's modules only, and this module imports
nothing of llm_lens: it is registered with nnsight to travel by value (its source), since NDIF
has no llm_lens installed; ``remote="local"`` checks the request as the server would.
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

# the rest of the vocabulary as the session format keeps it (core.sessions.compact, a layer
# above the engines): bins of TAIL_WIDTH nats below the highest, the last taking all lower
TAIL_BINS = 64
TAIL_WIDTH = 0.5

# what a family's forward does to the head's logits, in the order it does it, as the config
# names the number (the value is sent in CaptureSpec.head_scale):
# Falcon-H1 ``logits * config.lm_head_multiplier`` (FalconH1ForCausalLM.forward), Cohere and
# Cohere 2 ``logits * config.logit_scale`` (CohereForCausalLM.forward), the Granite families
# ``logits / config.logits_scaling`` (GraniteForCausalLM.forward), Gemma 2 and 3
# ``tanh(logits / cap) * cap`` with ``config.final_logit_softcapping`` (Gemma2ForCausalLM)
HEAD_SCALES = ("lm_head_multiplier", "logit_scale", "logits_scaling", "final_logit_softcapping")


@dataclass(frozen=True)
class CaptureSpec:
    """What a run asks the server for besides tokens."""

    top_n: int = 50
    lens_k: int = 5
    full_logits: bool = False  # the whole (vocab,) logits per step (the Sampling pane exact)
    heads: tuple[tuple[int, int], ...] = ()  # (layer, head) whose attention rows to bring back
    # set by the engine from the model and the run, not by the user:
    head_scale: tuple[tuple[str, float], ...] = ()  # (HEAD_SCALES name, the config's value)
    seed: int | None = None  # the server's torch seed for a sampled run (None: not seeded)


@dataclass(frozen=True)
class Targets:
    """The model's parts a trace reads, as nnsight envoys (found from the model's anatomy)."""

    layers: tuple[Any, ...]
    mixers: tuple[Any, ...]  # each layer's attention or token mixer
    final_norm: Any
    lm_head: Any
    project_out: Any = None  # OPT's projection between the final norm and the head
    routers: tuple[tuple[int, Any], ...] = ()  # (decoder layer, router envoy)
    attention_calls: dict[int, Any] = field(default_factory=dict)  # layer -> its attention call
    groups: int = 1  # query heads per key/value head


def load_nnsight() -> Any:
    """nnsight, imported; where this package is what imports it, without the ``.save()`` it
    mounts on every Python object at import (process-wide; these traces call ``nnsight.save``),
    so nothing else in the process finds a ``save`` it does not have."""
    first = "nnsight" not in sys.modules
    import nnsight

    if first:
        from nnsight._c import unmount

        if unmount is not None:
            unmount("save")
    return nnsight


def generate_steps(
    model: Any, targets: Targets, spec: CaptureSpec, ids: Any, gen: dict[str, Any], **how: Any
) -> list[dict[str, Any]]:
    """One generation on ``model`` (an nnsight model) from ``ids`` (1, T) with ``generate()``
    keywords ``gen``; ``how`` goes to the trace (``remote=``, ``backend=``). Returns each step's
    payload: a dict of small CPU tensors (see the module docstring)."""
    nnsight = load_nnsight()
    from nnsight.ndif import register

    # this module's functions and classes travel as source: NDIF has no llm_lens installed
    register(sys.modules[__name__])
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        # the open loop ends by asking for a step the generation never makes (by design)
        warnings.filterwarnings("ignore", message=".*was never reached.*")
        with model.generate(ids, **gen, **how) as tracer:
            if spec.seed is not None:
                torch.manual_seed(spec.seed)  # on the server, before generate()'s first draw
            steps = nnsight.save([])
            held = None
            for _step in tracer.all():
                held = _capture_step(model, targets, spec, held, steps)
    return list(steps)


def _capture_step(
    model: Any, targets: Targets, spec: CaptureSpec, previous: Any, steps: list[Any]
) -> dict[str, Any]:
    """One step, on the server: finish the previous step's reading with the token the
    generation chose (the streamer hands it over first), then capture this step's pass."""
    chosen = model.generator.streamer.output.reshape(-1)[-1]
    start = time.perf_counter()  # the previous token handed over: this step starts
    if previous is not None:
        logits = previous.pop("logits")
        previous["reading"] = _reading(logits, chosen, spec.top_n, TAIL_BINS, TAIL_WIDTH)
        previous["token"] = chosen.cpu()
        clock = previous.pop("started"), previous.pop("ended"), start
        previous["clock"] = torch.tensor(clock, dtype=torch.float64)
        steps.append(previous)
    held, residual = _capture_layers(targets, spec)
    lens_logits = _lens_logits(targets, dict(spec.head_scale), residual)  # (layers + 1, vocab)
    lens = torch.softmax(lens_logits, dim=-1).topk(spec.lens_k)
    held["lens_ids"] = lens.indices.to(torch.int32).cpu()
    held["lens_probs"] = lens.values.cpu()
    held["logits"] = model.output.logits[0, -1].float()  # (vocab,), read at the next step
    held["lens_gap"] = (lens_logits[-1] - held["logits"]).abs().max().cpu()
    if spec.full_logits:
        held["full"] = held["logits"].cpu()
    held["started"], held["ended"] = start, time.perf_counter()
    return held


def _lens_logits(targets: Targets, scale: dict[str, float], residual: Any) -> Any:
    """(rows, vocab) float32: the residual through the model's own final norm, projection and
    head, then the scaling its forward applies after the head, in its order and its dtype."""
    x = targets.final_norm(residual)
    if targets.project_out is not None:
        x = targets.project_out(x)
    logits = targets.lm_head(x)
    if "lm_head_multiplier" in scale:
        logits = logits * scale["lm_head_multiplier"]
    if "logit_scale" in scale:
        logits = logits * scale["logit_scale"]
    if "logits_scaling" in scale:
        logits = logits / scale["logits_scaling"]
    if "final_logit_softcapping" in scale:
        cap = scale["final_logit_softcapping"]
        logits = torch.tanh(logits / cap) * cap
    return logits.float()


def _capture_layers(targets: Targets, spec: CaptureSpec) -> tuple[dict[str, Any], Any]:
    """Each layer's reads in the order the model computes them (the opened heads' q/k, the
    mixer's output, the router's choice, the layer's output): the step's payload so far and
    the residual stream at the last position (layers + 1, hidden), which stays on the server."""
    held: dict[str, Any] = {}
    routers = dict(targets.routers)
    rows, updates, routing = [targets.layers[0].input[0, -1]], [], []
    for i, layer in enumerate(targets.layers):
        if i in targets.attention_calls:
            call = targets.attention_calls[i]
            held[f"heads{i}"] = _head_rows(call, list(spec.heads), i, targets.groups)
        out = targets.mixers[i].output
        updates.append((out[0] if isinstance(out, tuple) else out)[0, -1])  # (hidden,)
        if i in routers:
            routing.append(_router(routers[i].output))
        out = layer.output
        rows.append((out[0] if isinstance(out, tuple) else out)[0, -1])  # (hidden,)
    residual = torch.stack(rows)  # (layers + 1, hidden)
    held["norms"] = _norms(residual, torch.stack(updates))
    if routing:
        held["routing"] = routing
    return held, residual


def _norms(residual: Any, attn: Any) -> Any:
    """(4, layers + 1) float32: norms of the residual, attention, MLP and layer updates."""
    change = residual[1:] - residual[:-1]  # (layers, hidden)
    out = torch.zeros((4, residual.shape[0]), dtype=torch.float32, device=residual.device)
    out[0] = residual.float().norm(dim=-1)
    out[1, 1:] = attn.float().norm(dim=-1)
    out[2, 1:] = (change - attn).float().norm(dim=-1)
    out[3, 1:] = change.float().norm(dim=-1)
    return out.cpu()


def _reading(logits: Any, chosen: Any, top_n: int, bins: int, width: float) -> dict[str, Any]:
    """A step's distribution reduced on the server: top-N, log-sum-exp, entropy, the chosen
    token's logit and rank, and the rest as a histogram (count and log-sum-exp per bin)."""
    top = logits.topk(min(top_n, logits.shape[0]))
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp().double()  # the entropy as llm_lens.core.logits.entropy computes it
    entropy = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum()
    value = logits[chosen]
    tail = torch.ones_like(logits, dtype=torch.bool)
    tail[top.indices] = False
    tail[chosen] = False
    rest = logits[tail].double()
    peak = rest.max()
    index = ((peak - rest) / width).long().clamp(max=bins - 1)
    counts = torch.bincount(index, minlength=bins)
    edge = peak - width * torch.arange(bins, dtype=torch.float64, device=rest.device)
    last = index == bins - 1
    edge[-1] = torch.where(last.any(), rest.masked_fill(~last, -torch.inf).max(), edge[-1])
    sums = torch.zeros(bins, dtype=torch.float64, device=rest.device)
    sums.index_add_(0, index, (rest - edge[index]).exp())
    lse = torch.where(counts > 0, edge + sums.log(), torch.full_like(edge, -torch.inf))
    return {
        "top_ids": top.indices.to(torch.int32).cpu(),
        "top_logits": top.values.cpu(),
        "top_logprobs": logp[top.indices].cpu(),
        "lse": torch.logsumexp(logits, dim=-1).cpu(),
        "entropy": entropy.cpu(),
        "chosen_logit": value.cpu(),
        "chosen_logprob": logp[chosen].cpu(),
        "rank": (logits > value).sum().to(torch.int32).cpu(),
        "tail_counts": counts.to(torch.int32).cpu(),
        "tail_lse": lse.float().cpu(),
    }


def _router(output: Any) -> tuple[Any, Any, Any]:
    """A router's (logits, weights, chosen experts) at this pass's positions."""
    logits, weights, index = output[0], output[1], output[2]
    k = index.shape[-1]
    return (
        logits.reshape(-1, logits.shape[-1]).float().cpu(),
        weights.reshape(-1, k).float().cpu(),
        index.reshape(-1, k).to(torch.int32).cpu(),
    )


def _head_rows(call: Any, heads: list[tuple[int, int]], layer: int, groups: int) -> Any:
    """(opened heads of ``layer``, kv) float32: each opened head's last query's softmax over the
    cached keys, from what the model passed to its attention function: the rotated q, the
    cached k, the mask (a sliding window's, a padding's), the scaling and any soft-capping."""
    args, kwargs = call.inputs
    query, key = args[1], args[2]  # (1, heads, seq, d), (1, kv_heads, kv, d)
    mask = args[4] if len(args) > 4 else kwargs.get("attention_mask")
    scaling = kwargs.get("scaling")
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    chosen = [h for n, h in heads if n == layer]
    q = query[0, chosen, -1].float()  # (n, d)
    k = key[0, [h // groups for h in chosen]].float()  # (n, kv, d)
    scores = torch.einsum("nd,nkd->nk", q, k) * scale
    cap = kwargs.get("softcap")
    if cap:
        scores = torch.tanh(scores / cap) * cap
    if isinstance(mask, torch.Tensor):
        row = mask[0, 0, -1, -scores.shape[-1] :]  # (kv,): the last query's
        if row.dtype == torch.bool:
            scores = scores.masked_fill(~row, -torch.inf)
        else:
            scores = scores + row.float()
    return torch.softmax(scores, dim=-1).cpu()
