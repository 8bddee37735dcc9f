"""Steering: a direction in the residual stream, and the tensor edits the hooks make.

:func:`steering_vector` reads a direction from two sets of prompts (e.g. formal and casual): the
mean of the residual stream entering a layer over one set minus the same mean over the other.
Its :meth:`SteeringVector.to_intervention` is a :class:`ResidualAdd` of the vector times a
strength, added while the model generates (``llm-lens steer`` writes it to a ``.npy`` file for
``--intervene resid:L+=vec.npy*S``).

Which positions are averaged: every position of each prompt but its first and the tokenizer's
special tokens (BOS). The first position is where models park attention they do not need (the
"attention sink"): its residual is a hundred times larger than the others' (SmolLM2 at layer
12: about 22,000 against 130-280, whatever the token) and would swamp the difference. Each prompt
is averaged over its own positions first, then the prompts are averaged, so a long prompt counts
as much as a short one. What remains is what the two sets differ in on average at a token, which
is what an add at every position pushes towards.

:func:`residual_rows` and :func:`forget_mask` take the tensor the model was about to use and the
absolute position of the pass's first token (``offset``), and return the edited tensor; nothing
is edited in place.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.interventions.places import positions_of
from llm_lens.core.interventions.spec import (
    HeadPatch,
    InterventionError,
    ResidualAdd,
    ResidualPatch,
    _finite,
    _vector,
)
from llm_lens.core.streams import streams_of


@dataclass(frozen=True)
class SteeringVector:
    """The mean residual entering ``layer`` over the positive prompts minus that over the
    negative ones (see the module docstring for which positions), with how many of each."""

    layer: int
    vector: tuple[float, ...]
    positives: int
    negatives: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "vector", _vector(self.vector, "a steering vector"))

    @property
    def norm(self) -> float:
        return float(np.linalg.norm(self.vector))

    def to_intervention(self, strength: float, positions: Sequence[int] = ()) -> ResidualAdd:
        """The vector times ``strength`` added to the residual entering its layer at
        ``positions`` (every position, prompt and generated, when empty)."""
        factor = _finite(strength, "the steering strength")
        return ResidualAdd(self.layer, tuple(positions), tuple(factor * v for v in self.vector))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "steering_vector", "layer": self.layer, "vector": list(self.vector),
                "positives": self.positives, "negatives": self.negatives}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SteeringVector:
        try:
            return cls(int(data["layer"]), tuple(data["vector"]), int(data["positives"]),
                       int(data["negatives"]))  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise InterventionError(f"not a steering vector: {exc}") from None

    def save(self, path: str | Path) -> None:
        """The vector alone as a ``.npy`` file (what ``resid:L+=FILE`` reads), written whole or
        not at all."""
        target = Path(path)
        if target.suffix != ".npy":
            raise InterventionError(f"{target.name}: a steering vector is saved as a .npy file")
        part = target.with_name(target.name + ".part.npy")
        np.save(part, np.asarray(self.vector, dtype=np.float64))
        part.replace(target)


class _Enough(Exception):
    """Raised by the capturing hook: the layers after it are not needed."""


def layer_input(model: Any, anatomy: Anatomy, layer: int, ids: Sequence[int]) -> Any:
    """The residual stream entering ``layer`` at every position of ``ids`` (T, hidden), float64;
    the layers from ``layer`` on are not run."""
    layout = streams_of(anatomy)  # several parallel streams: (T, streams × hidden)

    def read(args: Any, kwargs: Any) -> Any:
        return positions_of(args[0] if args else kwargs["hidden_states"], layout).double().clone()

    return _first_input(model, anatomy.layers[layer], ids, read)


def _first_input(model: Any, module: Any, ids: Sequence[int], read: Any) -> Any:
    """``read(args, kwargs)`` of ``module``'s input in the model's own forward over ``ids``;
    the modules after it are not run (a pre-hook raises once it has read)."""
    from llm_lens.core.placement import input_device

    kept: list[Any] = []

    def grab(_m: Any, args: Any, kwargs: Any) -> None:
        kept.append(read(args, kwargs))
        raise _Enough

    device = input_device(model)  # not `meta` where a device map offloaded it
    handle = module.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([list(ids)], device=device), use_cache=False)
    except _Enough:
        pass
    finally:
        handle.remove()
    return kept[0]


def patch_from(
    model: Any, anatomy: Anatomy, layer: int, ids: Sequence[int], positions: Sequence[int]
) -> ResidualPatch:
    """Activation patching from another prompt: the residual stream entering ``layer`` at
    ``positions`` of the prompt ``ids``, as the patch that puts it in a run at the same places.
    """
    if not 0 <= layer < len(anatomy.layers):
        raise InterventionError(
            f"no layer {layer} (the model has layers 0-{len(anatomy.layers) - 1})"
        )
    wanted = sorted({int(p) for p in positions})
    if not wanted or wanted[0] < 0 or wanted[-1] >= len(ids):
        raise InterventionError(
            f"the other prompt has {len(ids)} tokens: it has no position "
            f"{wanted[-1] if wanted else '(none named)'}"
        )
    h = layer_input(model, anatomy, layer, ids)  # (T, hidden) float64
    rows = h[wanted].cpu().numpy()  # (positions, hidden)
    return ResidualPatch(layer, tuple(wanted), tuple(tuple(r) for r in rows.tolist()))


def head_patch_from(
    model: Any, anatomy: Anatomy, layer: int, head: int, ids: Sequence[int]
) -> HeadPatch:
    """Head patching from another prompt: head ``head``'s output at layer ``layer`` (its slice
    of the input to the attention output projection) at every position of the prompt ``ids``,
    as the patch that puts it in a run at the same places (a patching sweep's head cell)."""
    from llm_lens.core.anatomy import query_heads_of
    from llm_lens.core.interventions.places import out_projection

    if not 0 <= layer < len(anatomy.layers):
        raise InterventionError(
            f"no layer {layer} (the model has layers 0-{len(anatomy.layers) - 1})"
        )
    cfg = model.config.get_text_config(decoder=True)
    heads = query_heads_of(anatomy.attn[layer], int(getattr(cfg, "num_attention_heads", 0) or 0))
    if heads == 0:
        raise InterventionError(f"layer {layer} has no attention: no head to patch")
    if not 0 <= head < heads:  # a layer's own count (Inkling's differ)
        raise InterventionError(f"no head {head} (layer {layer} has heads 0-{heads - 1})")
    x = _first_input(model, out_projection(anatomy, layer), ids, lambda a, _k: a[0][0].double())
    rows = x.reshape(len(ids), heads, -1)[:, head].cpu().numpy()  # (T, head_dim)
    return HeadPatch(layer, head, tuple(range(len(ids))), tuple(map(tuple, rows.tolist())))


def steering_vector(
    model: Any,
    layer: int,
    positive: Sequence[Sequence[int]],
    negative: Sequence[Sequence[int]],
    anatomy: Anatomy | None = None,
    skip: Collection[int] = (),
) -> SteeringVector:
    """The difference of mean residuals entering ``layer`` between two sets of prompts (token
    ids); each prompt's first position, and positions holding a token in ``skip`` (the special
    tokens), are left out."""
    anatomy = anatomy or Anatomy.of(model)
    if not 0 <= layer < len(anatomy.layers):
        raise InterventionError(
            f"no layer {layer} (the model has layers 0-{len(anatomy.layers) - 1})"
        )
    means = []
    for name, prompts in (("positive", positive), ("negative", negative)):
        if not prompts:
            raise InterventionError(f"no {name} prompts: name at least one")
        rows = [_prompt_mean(model, anatomy, layer, ids, skip, name) for ids in prompts]
        means.append(torch.stack(rows).mean(dim=0))  # (hidden,)
    vector = (means[0] - means[1]).cpu().numpy()
    return SteeringVector(layer, tuple(vector.tolist()), len(positive), len(negative))


def _prompt_mean(model: Any, anatomy: Anatomy, layer: int, ids: Sequence[int],
                 skip: Collection[int], name: str) -> Any:  # fmt: skip
    """One prompt's residual entering ``layer``, averaged over its positions after the first
    whose token is not in ``skip``."""
    keep = [i for i, t in enumerate(ids) if i > 0 and t not in skip]
    if not keep:
        text = "no tokens after its first but special ones"
        raise InterventionError(f"a {name} prompt has {text}: it is too short to average")
    return layer_input(model, anatomy, layer, ids)[keep].mean(dim=0)  # (hidden,)


def residual_rows(h: Any, item: ResidualAdd | ResidualPatch, offset: int) -> Any:
    """``h`` (batch, seq, hidden) at positions ``offset``… with ``item`` applied to the rows of
    its positions that this pass holds (every row when a ResidualAdd names none)."""
    seq = h.shape[1]
    if isinstance(item, ResidualAdd):
        rows = list(range(seq)) if not item.positions else _rows(item.positions, offset, seq)
        if not rows:
            return h
        vector = torch.tensor(item.vector, dtype=h.dtype, device=h.device)  # (hidden,)
        out = h.clone()
        out[:, rows] += vector
        return out
    picked = [(r, i) for i, p in enumerate(item.positions) if 0 <= (r := p - offset) < seq]
    if not picked:
        return h
    values = torch.tensor(item.values, dtype=h.dtype, device=h.device)  # (positions, hidden)
    out = h.clone()
    out[:, [r for r, _ in picked]] = values[[i for _, i in picked]]
    return out


def _rows(positions: tuple[int, ...], offset: int, seq: int) -> list[int]:
    return [p - offset for p in positions if 0 <= p - offset < seq]


def forget_mask(mask: Any, position: int, offset: int, q_len: int, like: Any) -> Any:
    """The attention mask with the key at ``position`` hidden from every query after it.

    ``mask`` is what the attention module was given: None (plain causal), boolean (True reads)
    or additive (0 or the dtype's minimum), (batch, 1, q_len, keys); keys end at the last query's
    position. The result has the same kind, except None becomes boolean.
    """
    queries = torch.arange(offset, offset + q_len, device=like.device)  # (q_len,)
    if mask is None:
        keys_pos = torch.arange(offset + q_len, device=like.device)  # (keys,)
        mask = (keys_pos[None, :] <= queries[:, None])[None, None]  # (1, 1, q_len, keys)
    keys = mask.shape[-1]
    keys_pos = torch.arange(offset + q_len - keys, offset + q_len, device=like.device)
    hide = (keys_pos[None, :] == position) & (queries[:, None] > position)  # (q_len, keys)
    if not bool(hide.any()):
        return mask
    if mask.dtype == torch.bool:
        return mask & ~hide
    return mask.masked_fill(hide, torch.finfo(mask.dtype).min)
