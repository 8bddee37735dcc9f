"""One instrumented forward (and backward) pass over a step's context, for "why this token?".

The step loop records only the last position; explaining a token needs every position's
residual stream and what each attention block added, and, at the last position, the input to
each block's output projection. They come from a fresh pass over the context the step had read,
with hooks on the model's own modules (no family's maths is re-derived), and a backward pass from
the chosen token's log-probability to the input embeddings gives gradient × input.

A short context keeps every layer's attention weights from the pass (eager attention, cheap at a
hundred tokens). A long one keeps memory linear in the context: the pass runs the model's fused
attention (SDPA), which never holds a T × T matrix, and keeps only each attention block's inputs
(a family without SDPA, such as Gemma 2, runs eager and holds its weights for the backward
pass). The flow graph then asks for one layer's attention weights at a time
(:meth:`ContextTrace.weights`): they are recomputed by calling that block again, with eager
attention, on the inputs it had.

Post-norm blocks (OLMo 2, Gemma 2/3) normalise the attention output before adding it: what the
block added is read after its ``post_attention_layernorm``, and the raw output is kept so the
norm can be held at this step's scale per position. Granite's blocks scale what they add by
the layer's ``residual_multiplier``: what they added is the raw output times it.

Each block's values are what the cache's ``update`` handed it in the pass (every position it
attended over): a sliding-window layer's cache keeps only its last window − 1 afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from llm_lens.core import kvcache
from llm_lens.core.explain.hooks import (
    CACHE_KWARGS,
    NoSplit,
    PassHooks,
    attended,
    attention,
    checkpointed,
    frozen,
    out_projection,
    post_attention_norm,
)
from llm_lens.core.placement import offloaded, weights_of

CHECKPOINT_TOKENS = 512  # longer contexts recompute each layer in the backward pass instead of
# keeping its activations (autograd's saved tensors grow ~1 MB a token on the bundled model)
WEIGHT_BUDGET = 1 << 24  # floats (64 MB): every layer's weights are kept from the pass below
# this (a short context), else recomputed one layer at a time (memory linear in the context)


def norm_diag(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """(..., hidden) the diagonal an RMS-type ``norm`` multiplies each row of ``x`` by.

    Read from the norm itself on constant rows of the same mean square as ``x``'s (so the
    module's own weight, offset such as Gemma's ``1 + w``, and epsilon apply)."""
    dtype = norm.weight.dtype if hasattr(norm, "weight") else x.dtype
    rms = x.float().pow(2).mean(-1, keepdim=True).sqrt().clamp(min=1e-30)  # (..., 1)
    probe = rms.expand_as(x).to(dtype)
    diag: torch.Tensor = norm(probe).float() / probe.float()
    return diag.detach()


@dataclass
class ContextTrace:
    """What one pass over ``ids`` left behind (torch tensors, worker-side only; float32).

    ``pre[l]`` is the residual entering layer l (``pre[L]`` the last layer's output), ``attn[l]``
    what layer l's attention block added to it (after its post-norm, if any), ``raw_attn[l]``
    the block's output before that norm (None for pre-norm models), ``heads_in[l]`` the input of
    its output projection at the last position (the heads' outputs side by side) and
    ``values[l]`` its cached values.
    """

    ids: torch.Tensor  # (T,) int64
    pre: torch.Tensor  # (layers + 1, T, hidden)
    attn: torch.Tensor  # (layers, T, hidden)
    raw_attn: torch.Tensor | None  # (layers, T, hidden), post-norm models only
    # per layer (heads × head_dim,) at the last position: a layer's own heads (Inkling's differ)
    heads_in: list[torch.Tensor]
    # per layer (kv_heads, T, head_dim), a layer's own K/V heads (MiMo's differ by layer);
    # None: see layer_values
    values: list[torch.Tensor] | None
    logits: torch.Tensor  # (vocab,) the last position's logits
    grad_x_input: torch.Tensor  # (T,) gradient × input summed over the embedding dims
    target: int
    model: Any = field(default=None, repr=False)
    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    kept_weights: torch.Tensor | None = None  # (layers, heads, T, T) from a short pass
    new_cache: Any = field(default=None, repr=False)  # the engine's, for recomputed values
    recalled: tuple[int, torch.Tensor] | None = None  # (layer, values) of the last recompute
    post_norms: list[Any] = field(default_factory=list)  # per layer, for post-norm models
    # per layer, the factor a block multiplies its branches by before adding them (Granite's
    # residual_multiplier); empty: 1 everywhere
    branch: tuple[float, ...] = ()
    mlp_last: torch.Tensor | None = None  # (layers, hidden) what each MLP added, last position

    def weights(self, layer: int) -> torch.Tensor:
        """(heads, T, T) float32 attention weights of ``layer``: its block called again, with
        eager attention, on the inputs it had in the pass (one layer held at a time)."""
        if self.kept_weights is not None and self.values is not None:
            return self.kept_weights[layer]  # (a checkpointed pass recomputes: values come too)
        module, args, kwargs = self.calls[layer]
        cache = self.new_cache() if self.values is None else None
        with self.eager(), torch.no_grad(), _attended_or_none(cache) as seen:
            out = module(*args, **_eager_kwargs(kwargs, self.ids.shape[0], cache))
        weights: torch.Tensor | None = out[1] if isinstance(out, tuple) and len(out) > 1 else None
        if weights is None:
            raise ValueError("the attention block returned no weights under eager attention")
        if cache is not None:
            index = getattr(module, "layer_idx", layer)
            self.recalled = (layer, _values(cache, seen, [index])[0])
        return weights[0].float()  # (heads, T, T)

    def layer_values(self, layer: int) -> torch.Tensor:
        """(kv_heads, T, head_dim) ``layer``'s values: from the pass's cache, or (a
        checkpointed pass) from the call that last recomputed that layer's weights."""
        if self.values is not None:
            return self.values[layer]
        if self.recalled is None or self.recalled[0] != layer:
            self.weights(layer)
        assert self.recalled is not None
        return self.recalled[1]

    @contextmanager
    def eager(self) -> Iterator[None]:
        """Eager attention for the blocks called inside (once for a whole walk over layers)."""
        impl = self.model.config._attn_implementation
        if impl == "eager" or self.kept_weights is not None:
            yield
            return
        self.model.set_attn_implementation("eager")
        try:
            yield
        finally:
            self.model.set_attn_implementation(impl)

    def post_diag(self, layer: int, rows: torch.Tensor) -> torch.Tensor | None:
        """(R, hidden) the map from the attention block's output to what it added at
        ``rows``: the post-attention norm's diagonal held at this pass's scale, times the
        block's branch multiplier (None for a pre-norm block added as it is)."""
        if self.raw_attn is None:
            return None
        raw = self.raw_attn[layer, rows]
        norm = self.post_norms[layer] if self.post_norms else None
        diag = norm_diag(norm, raw) if norm is not None else torch.ones_like(raw)
        return diag * self.branch[layer] if self.branch else diag


def _eager_kwargs(kwargs: dict[str, Any], tokens: int, cache: Any = None) -> dict[str, Any]:
    """The block's own call, with a fresh ``cache`` (or none) for the pass's, and a mask eager
    attention understands: SDPA passes None for a purely causal mask and booleans otherwise;
    eager adds a float mask."""
    out = {k: (cache if k in CACHE_KWARGS else v) for k, v in kwargs.items()}
    if cache is not None and not any(k in out for k in CACHE_KWARGS):
        out["cache"] = cache
    out["use_cache"] = False
    mask = out.get("attention_mask")
    dtype = torch.float32
    low = torch.finfo(dtype).min
    if mask is None:
        keep = torch.ones(tokens, tokens, dtype=torch.bool).tril()[None, None]
        out["attention_mask"] = torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, low)
    elif mask.dtype == torch.bool:
        out["attention_mask"] = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, low)
    return out


def trace_context(
    engine: Any,
    ids: list[int] | Any,
    target: int,
    weight_budget: int = WEIGHT_BUDGET,
    checkpoint_tokens: int = CHECKPOINT_TOKENS,
) -> ContextTrace:
    """Run the model over ``ids`` with hooks, then back-propagate log p(``target``) at the last
    position to the input embeddings. Attention weights are kept when every layer's fit in
    ``weight_budget`` floats; otherwise the pass holds no T × T matrix (fused attention). Past
    ``checkpoint_tokens`` each layer keeps only its input for the backward pass and runs again
    there (one more forward's work; memory: one layer's activations, not every layer's)."""
    model, anatomy, info = engine.model, engine.anatomy, engine.info
    tokens = len(ids)
    keep = info.num_layers * info.num_heads * tokens * tokens <= weight_budget
    # an offloaded model recomputes each layer in the backward too: otherwise autograd keeps
    # every layer's loaded weights (what the input's gradient needs) until the backward
    again = tokens > checkpoint_tokens or offloaded(model)
    fused = getattr(model, "_supports_sdpa", False) and not keep  # Gemma 2: eager only
    impl = "sdpa" if fused else "eager"
    # the worker serves analyses in inference mode: leave it, and make every tensor in here
    with torch.inference_mode(False), torch.enable_grad(), frozen(model), attention(model, impl):
        ids_t = torch.tensor(np.asarray(ids), dtype=torch.long, device=engine.device)[None]
        embeds = anatomy.embed(ids_t).detach().requires_grad_(True)  # (1, T, hidden)
        cache = engine.new_cache()
        with (
            PassHooks(anatomy, keep) as hooks,
            checkpointed(anatomy.layers, again),
            attended(cache) as seen,
        ):
            out = model(
                inputs_embeds=embeds.clone(),  # CTRL scales its input embeddings in place
                use_cache=True,
                logits_to_keep=1,
                output_attentions=keep,
                **{engine.cache_kw: cache},
            )
        logits = out.logits[0, -1].float()  # (vocab,)
        logp = torch.log_softmax(logits, dim=-1)[target]
        (grad,) = torch.autograd.grad(logp, embeds)
        gxi = (grad * embeds).sum(dim=-1)[0].detach().float()  # (T,)
    # a checkpointed pass ran its layers without the cache: values come with each layer's call
    indices = [getattr(block, "layer_idx", i) for i, block in enumerate(anatomy.attn)]
    values = None if again else _values(cache, seen, indices)
    raw = hooks.attn.done()  # (L, T, hidden)
    added = hooks.added.done() if hooks.added.count else None
    mlp_last = _stack_last(hooks.mlp, len(anatomy.layers))
    # Granite adds ``residual + branch × residual_multiplier`` (the layer's own attribute)
    branch = tuple(float(getattr(la, "residual_multiplier", 1.0)) for la in anatomy.layers)
    if any(m != 1.0 for m in branch):
        m = torch.tensor(branch, dtype=torch.float32, device=raw.device)
        added = (raw if added is None else added) * m[:, None, None]
        mlp_last = None if mlp_last is None else mlp_last * m[:, None]
    else:
        branch = ()
    return ContextTrace(
        ids=ids_t[0],
        pre=hooks.pre.done(),
        attn=raw if added is None else added,
        raw_attn=None if added is None else raw,
        heads_in=[x[0].float() for x in hooks.heads_in],
        values=values,
        logits=logits.detach(),
        grad_x_input=gxi,
        target=target,
        model=model,
        new_cache=engine.new_cache,
        calls=hooks.calls,
        kept_weights=_stack_all(hooks.weights, len(anatomy.layers)),
        post_norms=[post_attention_norm(layer) for layer in anatomy.layers],
        mlp_last=mlp_last,
        branch=branch,
    )


@contextmanager
def _attended_or_none(cache: Any) -> Iterator[dict[int, torch.Tensor]]:
    if cache is None:
        yield {}
        return
    with attended(cache) as seen:
        yield seen


def _values(cache: Any, seen: dict[int, torch.Tensor], layers: list[int]) -> list[torch.Tensor]:
    """Each of ``layers``' values (kv_heads, T, head_dim) float32, as its block attended over
    them in the pass (every position, a windowed layer's too; :func:`.hooks.attended`); from
    the cache itself for a block that did not go through ``cache.update``."""
    pairs = kvcache.cache_tensors(cache)
    missing = [i for i in layers if i not in seen and pairs[i][1] is None]
    if missing:  # Gemma 3n: a layer reading the K/V another layer computed keeps none
        raise NoSplit(f"layer {missing[0]} reads another layer's keys and values")
    return [(seen[i] if i in seen else pairs[i][1][0].detach()).float() for i in layers]


def _stack_all(weights: list[Any], layers: int) -> torch.Tensor | None:
    """(layers, heads, T, T) float32 when every layer returned its weights, all of one shape
    (not where layers have head counts of their own: then each is recomputed), else None."""
    same = len({tuple(w.shape) for w in weights}) == 1
    return torch.stack(weights).float() if len(weights) == layers and same else None


def _stack_last(rows: list[Any], layers: int) -> torch.Tensor | None:
    """(layers, hidden) float32 when every layer reported one row, else None."""
    return torch.stack([r[0] for r in rows]).float() if len(rows) == layers else None


def check_additive(engine: Any, trace: ContextTrace, tol: float = 1e-3) -> None:
    """Refuse, in one line, a model whose layers do not add their attention and MLP outputs to
    the residual stream as they are, or whose attention output is not its heads through the
    output projection: the logit would not split exactly over those pieces."""
    name = type(engine.model).__name__
    pre = trace.pre[:, -1]  # (L + 1, hidden)
    step = pre[1:] - pre[:-1]  # (L, hidden)
    scale = step.abs().amax(-1).clamp(min=1e-12)  # (L,)
    if trace.mlp_last is not None:
        err = (step - trace.attn[:, -1] - trace.mlp_last).abs().amax(-1) / scale
        if bool((err > tol).any()):
            layer = int(err.argmax())
            raise NoSplit(
                f"{name}: layer {layer} does not add its attention and MLP outputs to the "
                "residual stream as they are, so the logit does not split exactly over them"
            )
    raw = (trace.raw_attn if trace.raw_attn is not None else trace.attn)[:, -1]
    with torch.no_grad():
        for layer, block in enumerate(engine.anatomy.attn):
            proj = out_projection(block)
            with weights_of(engine.model, engine.anatomy.layers[layer]):  # where offloaded
                # ``forward``, not the module call: an intervention's hook on the projection
                # (What if? a head scaled) is active here and already changed ``heads_in``
                got = proj.forward(trace.heads_in[layer].to(proj.weight.dtype)).float()
            got = got.to(raw.device)
            if float((got - raw[layer]).abs().max()) > tol * max(float(scale[layer]), 1e-6):
                raise NoSplit(
                    f"{name}: layer {layer}'s attention output is not its heads through the "
                    "output projection, so the logit does not split exactly over the heads"
                )
