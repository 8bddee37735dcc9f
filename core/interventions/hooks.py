"""Applying interventions: forward hooks and pre-hooks on the model's own modules.

:class:`Patcher` holds a run's interventions and what they remember between passes (a head's
mean over the prompt); ``with patcher.active():`` puts its hooks on for one or more forward
passes and takes them all off on leaving, whatever happened. :func:`applied` is the one-shot
form for scripts. Hooks never copy a model class: each edits one module's input or output.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from llm_lens.core.anatomy import Anatomy, query_heads_of
from llm_lens.core.interventions.checks import check
from llm_lens.core.interventions.places import block_of, out_projection, router_of, stream_rows
from llm_lens.core.interventions.spec import (
    BlockEdit,
    ExpertEdit,
    Forget,
    HeadEdit,
    HeadPatch,
    Intervention,
    InterventionError,
    ResidualAdd,
    ResidualPatch,
)
from llm_lens.core.interventions.steer import forget_mask, residual_rows
from llm_lens.core.streams import streams_of

CACHE_KWARGS = ("cache", "past_key_values")


class Patcher:
    """A run's interventions on one model: checked once, hooked for each forward pass."""

    def __init__(self, model: Any, anatomy: Anatomy, interventions: Sequence[Intervention]):
        self.model = model
        self.anatomy = anatomy
        self.interventions = tuple(interventions)
        check(self.interventions, model, anatomy)
        self.offset = 0  # the absolute position of the current pass's first token
        self.means: dict[tuple[int, int], Any] = {}  # (layer, head) -> (head_dim,) prompt mean
        cfg = model.config.get_text_config(decoder=True)
        self.heads = int(getattr(cfg, "num_attention_heads", None) or 1)  # Mamba's config: none

    def carried(self) -> Patcher:
        """The same interventions for a run that goes on from this one's cache (a branch, a
        continuation): the prompt means already read are kept, so the child changes the model
        exactly as this run did."""
        twin = copy.copy(self)
        twin.means = dict(self.means)
        return twin

    @property
    def reads_prompt(self) -> bool:
        """Whether an intervention depends on the whole prompt (a head's prompt mean): a cache
        made under it belongs to that prompt alone."""
        return any(isinstance(i, HeadEdit) and i.op == "mean" for i in self.interventions)

    @contextlib.contextmanager
    def active(self) -> Iterator[Patcher]:
        """The hooks on for the passes inside; every one removed on leaving."""
        handles: list[Any] = []
        try:
            if self.interventions:
                handles.append(
                    self.anatomy.decoder.register_forward_pre_hook(self._cursor, with_kwargs=True)
                )
            for item in self.interventions:
                handles.extend(self._hook(item))
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def _cursor(self, _module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        cache = next((kwargs[k] for k in CACHE_KWARGS if kwargs.get(k) is not None), None)
        self.offset = int(cache.get_seq_length()) if cache is not None else 0

    def _hook(self, item: Intervention) -> list[Any]:
        a = self.anatomy
        if isinstance(item, HeadEdit | HeadPatch):
            proj = out_projection(a, item.layer)
            return [proj.register_forward_pre_hook(partial(self._head, item))]
        if isinstance(item, BlockEdit):
            module = block_of(a, item.layer, item.part)
            return [module.register_forward_hook(partial(_scale_output, item.factor))]
        if isinstance(item, ResidualAdd | ResidualPatch):
            hook = partial(self._residual, item)
            return [a.layers[item.layer].register_forward_pre_hook(hook, with_kwargs=True)]
        if isinstance(item, ExpertEdit):
            return _router_hooks(router_of(self.model, item.layer), item)
        if isinstance(item, Forget):
            hook = partial(self._forget, item.position)
            attns = a.attention_modules()  # (a Mamba layer has no queries to hide)
            return [m.register_forward_pre_hook(hook, with_kwargs=True) for m in attns]
        raise TypeError(f"not an intervention: {item!r}")

    def _head(
        self, item: HeadEdit | HeadPatch, _module: Any, args: tuple[Any, ...]
    ) -> tuple[Any, ...]:
        x = args[0]  # (batch, seq, heads * head_dim): the heads' outputs side by side
        own = query_heads_of(self.anatomy.attn[item.layer], self.heads)  # Inkling's differ
        heads = x.reshape(*x.shape[:-1], own, -1).clone()  # (batch, seq, heads, head_dim)
        if isinstance(item, HeadPatch):
            _patch_head_rows(heads, item, self.offset)
        elif item.op == "mean":
            key = (item.layer, item.head)
            if key not in self.means:  # the first pass reads the prompt
                self.means[key] = heads[..., item.head, :].mean(dim=-2, keepdim=True)
            heads[..., item.head, :] = self.means[key]
        else:
            heads[..., item.head, :] *= item.factor
        return (heads.reshape(x.shape), *args[1:])

    def _residual(
        self, item: ResidualAdd | ResidualPatch, _m: Any, args: tuple[Any, ...], kw: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        h = args[0] if args else kw["hidden_states"]  # (batch, seq, hidden)
        layout = streams_of(self.anatomy)  # several parallel streams: each gets the row
        if layout.several:
            h = stream_rows(h, item, self.offset, layout)
        else:
            h = residual_rows(h, item, self.offset)
        if args:
            return (h, *args[1:]), kw
        return args, kw | {"hidden_states": h}

    def _forget(
        self, position: int, _m: Any, args: tuple[Any, ...], kw: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if "attention_mask" not in kw:
            if "attention" in type(_m).__name__.lower():  # never silently nothing
                raise InterventionError(f"{type(_m).__name__} is not given its mask by name")
            return args, kw  # a mixer that takes no mask (Mamba, convolution)
        h = args[0] if args else kw["hidden_states"]  # (batch, seq, hidden)
        mask = forget_mask(kw["attention_mask"], position, self.offset, h.shape[1], h)
        return args, kw | {"attention_mask": mask}


def _patch_head_rows(heads: Any, item: HeadPatch, offset: int) -> None:
    """``heads`` (batch, seq, heads, head_dim), whose first position is ``offset``, with head
    ``item.head`` at each of ``item.positions`` this pass holds set to its row (in place)."""
    seq = heads.shape[1]
    picked = [(r, i) for i, p in enumerate(item.positions) if 0 <= (r := p - offset) < seq]
    if not picked:
        return
    values = torch.tensor(item.values, dtype=heads.dtype, device=heads.device)  # (P, head_dim)
    rows = torch.tensor([r for r, _ in picked], device=heads.device)
    heads[:, rows, item.head] = values[[i for _, i in picked]]


def _scale_output(factor: float, _module: Any, _inputs: Any, output: Any) -> Any:
    """A block's output times ``factor`` (the first item of a tuple output)."""
    if isinstance(output, tuple):
        return (output[0] * factor, *output[1:])
    return output * factor


class _RouterMask(TorchFunctionMode):
    """While a router runs: its logits (the linear map to one score per expert) masked."""

    def __init__(self, experts: int, item: ExpertEdit) -> None:
        super().__init__()
        self.experts, self.item = experts, item

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is torch.nn.functional.linear and out.shape[-1] == self.experts:
            out = mask_router_logits(out, self.item)
        return out


def mask_router_logits(logits: Any, item: ExpertEdit) -> Any:
    """``logits`` (..., experts) with the forbidden experts' (or every unforced one's) set to
    the dtype's minimum, so no softmax or top-k picks them."""
    chosen = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
    chosen[list(item.experts)] = True
    hide = chosen if item.op == "off" else ~chosen
    return logits.masked_fill(hide, torch.finfo(logits.dtype).min)


def _router_hooks(router: Any, item: ExpertEdit) -> list[Any]:
    experts = int(router.weight.shape[0])
    modes: list[_RouterMask] = []

    def enter(_module: Any, _args: Any) -> None:
        modes.append(_RouterMask(experts, item))
        modes[-1].__enter__()  # type: ignore[no-untyped-call]

    def leave(_module: Any, _args: Any, _output: Any) -> None:
        if modes:
            modes.pop().__exit__(None, None, None)  # type: ignore[no-untyped-call]

    return [
        router.register_forward_pre_hook(enter),
        router.register_forward_hook(leave, always_call=True),
    ]


@contextlib.contextmanager
def applied(
    model: Any, interventions: Sequence[Intervention], anatomy: Anatomy | None = None
) -> Iterator[Patcher]:
    """``interventions`` hooked on ``model`` for the passes inside (a script's one-shot form)."""
    patcher = Patcher(model, anatomy or Anatomy.of(model), interventions)
    with patcher.active():
        yield patcher


@contextlib.contextmanager
def hooked_for(run: Any) -> Iterator[None]:
    """The interventions of ``run`` (a live run, a branch's path, anything with a ``patcher``
    or a ``run`` that has one) hooked on for the passes inside; nothing for a plain run. An
    analysis that reads the model again (a prompt's attention maps, "why this token?") runs
    inside, so it sees the model the run saw."""
    patcher = getattr(run, "patcher", None) or getattr(getattr(run, "run", None), "patcher", None)
    if patcher is None:
        yield
        return
    with patcher.active():
        yield
