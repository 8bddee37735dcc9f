""" "Why this token?" where the logit does not split: what can still be shown, and why not the rest.

The split over embedding, heads and MLPs (:mod:`.attribution`) needs every layer to be attention
whose heads go through an output projection and whose block outputs are added to the residual
as they are. A layer that is a Mamba, DeltaNet or convolution mixer, latent attention (its cache
holds one compressed latent, not each head's values), or a block that normalises or mixes its
outputs before adding them (Bloom, GLM-4's post-sublayer norms) breaks that. Gradient × input
needs none of it: one forward and backward pass of the model's own code over the context.
:func:`split_refusal` names the reason before the pass where the anatomy already tells;
:func:`gradient_pass` is the pass; ``attribution.unsplit_explanation`` the explanation then:
the input tokens' shares, the split's pieces left at zero, and the reason in one line
(``LogitAttribution.unsplit``).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from llm_lens.core.explain.hooks import frozen
from llm_lens.core.streams import streams_of

ONLY_INPUTS = "only the input tokens' share (gradient × input) is shown"


def split_refusal(engine: Any) -> str | None:
    """Why this model's logit cannot split over heads and MLPs, known from its anatomy; None
    where the pass itself must tell (:func:`.trace.check_additive`)."""
    anatomy = engine.anatomy
    layout = streams_of(anatomy)
    if layout.several:  # Gemma 3n's AltUp, DeepSeek-V4's hyper-connections
        what = f"the residual is {layout.count} parallel streams that the layers mix"
        return f"{what}, so no block's output is added to it as it is; {ONLY_INPUTS}"
    for layer, kind in enumerate(anatomy.kinds):
        if not anatomy.has_attention(layer) or kind not in ("attention", "sparse attention"):
            what = (
                "latent attention (its cache holds one compressed latent, not each head's values)"
                if "latent" in kind
                else f"a {kind} layer"
            )
            return f"layer {layer} is {what}: the logit does not split over heads; {ONLY_INPUTS}"
    sizes = sorted({d for d in engine.info.layer_head_dims if d})
    if len(sizes) > 1:  # Gemma 4: its full-attention layers' heads are wider
        shown = ", ".join(str(d) for d in sizes)
        what = f"the layers' heads differ in size ({shown})"
        return f"{what}: the split over heads is not drawn; {ONLY_INPUTS}"
    return None


def gradient_pass(engine: Any, ids: Any, target: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (vocab,), gradient × input (T,)) of log p(``target``) at the last position, from
    the model's own forward over the input embeddings (no hooks)."""
    model, anatomy = engine.model, engine.anatomy
    with torch.inference_mode(False), torch.enable_grad(), frozen(model):
        ids_t = torch.tensor(np.asarray(ids), dtype=torch.long, device=engine.device)[None]
        if "inputs_embeds" in inspect.signature(model.forward).parameters:
            embeds = anatomy.embed(ids_t).detach().requires_grad_(True)  # (1, T, hidden)
            logits = _logits_from(model, anatomy, ids_t, embeds)  # (vocab,)
        else:  # CPM-Ant takes ids only: its embedding module's output is made the leaf
            out, embeds = _embedded_as_leaf(model, ids_t)  # (1, T or more, hidden)
            logits = out.logits[0, -1].float()  # (vocab,)
        logp = torch.log_softmax(logits, dim=-1)[target]
        (grad,) = torch.autograd.grad(logp, embeds)
        gxi = (grad * embeds).sum(dim=-1)[0, -ids_t.shape[1] :].detach().float()  # (T,)
    return logits.detach(), gxi


def _logits_from(model: Any, anatomy: Any, ids: Any, embeds: Any) -> torch.Tensor:
    """The last position's logits (vocab,) of the model run on ``embeds``; where the model
    cannot run on embeddings alone (DeepSeek-V4's hash-routed layers read the token ids), on
    ``ids`` with its embedding module's output replaced by ``embeds``."""
    try:
        # a copy goes in: a family that scales its input embeddings in place (CTRL) may
        out = model(inputs_embeds=embeds.clone(), use_cache=False)
    except (AttributeError, TypeError, ValueError):
        handle = anatomy.embed.register_forward_hook(lambda *_: embeds.clone())
        try:
            out = model(input_ids=ids, use_cache=False)
        finally:
            handle.remove()
    logits: torch.Tensor = out.logits[0, -1].float()
    return logits


def _embedded_as_leaf(model: Any, ids: Any) -> tuple[Any, torch.Tensor]:
    """The model's own forward over ``ids`` with its input embedding module's output replaced
    by a detached copy that requires grad, and that copy (CPM-Ant's includes the prefix of
    its own it prepends: gradient × input keeps the last len(ids) positions)."""
    kept: list[torch.Tensor] = []

    def leaf(_m: Any, _i: Any, output: torch.Tensor) -> torch.Tensor:
        kept.append(output.detach().requires_grad_(True))
        return kept[-1]

    handle = model.get_input_embeddings().register_forward_hook(leaf)
    try:
        out = model(input_ids=ids, use_cache=False)
    finally:
        handle.remove()
    return out, kept[0]
