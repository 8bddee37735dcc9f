"""One instrumented forward (and backward) pass over a step's context, for "why this token?".

The step loop records only the last position; explaining a token needs every position's
residual stream, every head's attention weights and values and the input to each attention
block's output projection. They come from a fresh pass over the context the step had read, with
hooks on the model's own modules (no family's maths is re-derived), and a backward pass from the
chosen token's log-probability to the input embeddings gives gradient × input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llm_lens.core import kvcache
from llm_lens.core.anatomy import Anatomy

OUT_PROJECTIONS = ("o_proj", "c_proj", "dense", "out_proj")


def out_projection(attn: Any) -> Any:
    """The attention block's output projection (the module that mixes the heads' outputs)."""
    for name in OUT_PROJECTIONS:
        proj = getattr(attn, name, None)
        if proj is not None and hasattr(proj, "weight"):
            return proj
    raise ValueError(f"{type(attn).__name__}: cannot find the attention output projection")


def out_weight(attn: Any) -> torch.Tensor:
    """(hidden, heads × head_dim) weight of the output projection (GPT-2's ``Conv1D`` stores
    the transpose of a ``Linear``'s weight: it is turned around here)."""
    proj = out_projection(attn)
    weight: torch.Tensor = proj.weight
    return weight.t() if type(proj).__name__ == "Conv1D" else weight


@dataclass
class ContextTrace:
    """What one pass over ``ids`` left behind (torch tensors, worker-side only; float32).

    ``pre[l]`` is the residual entering layer l (``pre[L]`` the last layer's output), ``attn[l]``
    what layer l's attention block added, ``heads_in[l]`` the input of its output projection
    (the heads' outputs side by side), ``weights[l]`` its attention weights and ``values[l]`` its
    cached values.
    """

    ids: torch.Tensor  # (T,) int64
    pre: torch.Tensor  # (layers + 1, T, hidden)
    attn: torch.Tensor  # (layers, T, hidden)
    heads_in: torch.Tensor  # (layers, T, heads × head_dim)
    weights: torch.Tensor  # (layers, heads, T, T)
    values: torch.Tensor  # (layers, kv_heads, T, head_dim)
    logits: torch.Tensor  # (vocab,) the last position's logits
    grad_x_input: torch.Tensor  # (T,) gradient × input summed over the embedding dims
    target: int


class _Hooks:
    """Forward hooks on the layers, attention blocks and output projections of one model."""

    def __init__(self, anatomy: Anatomy) -> None:
        self.anatomy = anatomy
        self.pre: list[Any] = []
        self.attn: list[Any] = []
        self.weights: list[Any] = []
        self.heads_in: list[Any] = []
        self._handles: list[Any] = []

    def __enter__(self) -> _Hooks:
        a = self.anatomy
        h = self._handles
        h.append(a.layers[0].register_forward_pre_hook(self._on_first, with_kwargs=True))
        for layer, attn in zip(a.layers, a.attn, strict=True):
            h.append(layer.register_forward_hook(self._on_layer))
            h.append(attn.register_forward_hook(self._on_attn))
            proj = out_projection(attn)
            h.append(proj.register_forward_pre_hook(self._on_proj))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _on_first(self, _m: Any, args: Any, kwargs: Any) -> None:
        self.pre.append((args[0] if args else kwargs["hidden_states"]).detach())

    def _on_layer(self, _m: Any, _i: Any, output: Any) -> None:
        self.pre.append((output[0] if isinstance(output, tuple) else output).detach())

    def _on_attn(self, _m: Any, _i: Any, output: Any) -> None:
        self.attn.append(output[0].detach())
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        self.weights.append(None if weights is None else weights.detach())

    def _on_proj(self, _m: Any, args: Any) -> None:
        self.heads_in.append(args[0].detach())


def trace_context(engine: Any, ids: list[int] | Any, target: int) -> ContextTrace:
    """Run the model over ``ids`` with hooks, then back-propagate log p(``target``) at the last
    position to the input embeddings. Needs eager attention (the weights); switched on here."""
    model, anatomy = engine.model, engine.anatomy
    if model.config._attn_implementation != "eager":
        model.set_attn_implementation("eager")
    # the worker serves analyses in inference mode: leave it, and make every tensor in here
    with torch.inference_mode(False), torch.enable_grad():
        ids_t = torch.tensor(np.asarray(ids), dtype=torch.long, device=engine.device)[None]
        embeds = anatomy.embed(ids_t).detach().requires_grad_(True)  # (1, T, hidden)
        with _Hooks(anatomy) as hooks:
            cache = engine.new_cache()
            out = model(
                inputs_embeds=embeds,
                use_cache=True,
                output_attentions=True,
                logits_to_keep=1,
                **{engine.cache_kw: cache},
            )
        logits = out.logits[0, -1].float()  # (vocab,)
        logp = torch.log_softmax(logits, dim=-1)[target]
        # autograd.grad to the embeddings only: no weight gradient is ever computed
        (grad,) = torch.autograd.grad(logp, embeds)
        gxi = (grad * embeds).sum(dim=-1)[0].detach().float()  # (T,)
    if any(w is None for w in hooks.weights):
        raise ValueError("the model returned no attention weights (eager attention is needed)")
    values = [v[0].detach() for _k, v in kvcache.cache_tensors(cache)]  # (kv_heads, T, hd)
    return ContextTrace(
        ids=ids_t[0],
        pre=torch.stack([p[0] for p in hooks.pre]).float(),
        attn=torch.stack([a[0] for a in hooks.attn]).float(),
        heads_in=torch.stack([x[0] for x in hooks.heads_in]).float(),
        weights=torch.stack([w[0] for w in hooks.weights]).float(),
        values=torch.stack(values).float(),
        logits=logits.detach(),
        grad_x_input=gxi,
        target=target,
    )
