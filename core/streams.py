"""A residual stream that is several parallel streams, read through the model's own modules.

Gemma 3n (AltUp) and DeepSeek-V4 and HY-v4 (hyper-connections) pass a stack of S streams from
layer to layer, (S, batch, seq, hidden) or (batch, seq, S, hidden), and collapse it into one
vector only before their final norm: DeepSeek-V4's and HY-v4's ``hc_head``, Gemma 3n's
unembedding projections and mean (inline in its model's forward). No single vector of a layer's
streams has one meaning, so LLM Lens records, as "the residual" after each layer, what the model
itself would read there: the vector its own tail collapses the streams into, found by running
the model's own forward with the streams as its last layer's output and stopping at the final
norm's input (:func:`collapse`). The lens feeds such a vector to the final norm's input
(:func:`final_norm_fed`), so its last row is the model's output by construction.

:func:`streams_of` finds the layout from the model's own first layer's input (one probe of a few
tokens through the embeddings, kept on the :class:`~llm_lens.core.anatomy.Anatomy`), with no
list of families or config names.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

PROBE_TOKENS = (7, 11)  # probe lengths unlikely to equal a stream count (the second if so)
COLLAPSE_BUDGET = 1 << 24  # stack elements collapsed in one pass (64 MB of float32)


@dataclass(frozen=True)
class Streams:
    """How a model's residual is laid out: ``count`` parallel streams on tensor axis ``axis``
    (-1 where there is one stream)."""

    count: int
    axis: int

    @property
    def several(self) -> bool:
        return self.count > 1

    def batch_seq_axes(self) -> tuple[int, int]:
        """The batch and sequence axes of a 4-D stream stack (the two of 0-2 not ``axis``)."""
        batch, seq = (i for i in range(3) if i != self.axis)
        return batch, seq

    def note(self) -> str:
        """The one line the panes and JSON carry where the residual is several streams."""
        return (
            f"the residual is {self.count} parallel streams: each layer's residual shown (its "
            "norm, lens) is the one vector the model's own tail collapses them into before its "
            "final norm; the layers mix the streams, so 'MLP' is that vector's change less the "
            "attention's output"
        )


SINGLE = Streams(1, -1)


class _Stop(Exception):
    """Raised by a hook to end a forward pass once it has what it came for."""


def streams_of(anatomy: Any) -> Streams:
    """The layout of ``anatomy``'s model's residual, probed once and kept on the anatomy."""
    found = getattr(anatomy, "streams", None)
    if found is None:
        found = _probe(anatomy)
        anatomy.streams = found
    return found


def _probe(anatomy: Any) -> Streams:
    """The first layer's input on a few tokens: 3-D is one stream; 4-D holds the streams on
    the axis whose removal leaves (1, tokens, hidden)."""
    for seq in PROBE_TOKENS:
        try:
            shape = tuple(_first_layer_input(anatomy, seq).shape)
        except Exception:  # noqa: BLE001 - a family the probe cannot run: one stream, as before
            return SINGLE
        if len(shape) != 4:
            return SINGLE
        fits = [i for i in range(3) if shape[:i] + shape[i + 1 : 3] == (1, seq)]
        if len(fits) == 1:
            return Streams(int(shape[fits[0]]), fits[0])
    return SINGLE


def _first_layer_input(anatomy: Any, seq: int) -> Any:
    kept: list[Any] = []

    def grab(_m: Any, args: Any, kwargs: Any) -> None:
        kept.append(args[0] if args else kwargs["hidden_states"])
        raise _Stop

    handle = anatomy.layers[0].register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.inference_mode():
            anatomy.decoder(input_ids=_zeros(anatomy, 1, seq), use_cache=False)
    except _Stop:
        pass
    finally:
        handle.remove()
    if not kept:
        raise RuntimeError("the first layer was not run")
    return kept[0]


def _zeros(anatomy: Any, batch: int, seq: int) -> Any:
    from llm_lens.core.placement import input_device

    return torch.zeros((batch, seq), dtype=torch.long, device=input_device(anatomy.decoder))


def collapse(anatomy: Any, stacks: list[Any], rest: tuple[Any, ...] | None) -> Any:
    """(N, seq, hidden): each stream stack of ``stacks`` (as a layer returned or received it,
    one sequence each) as the vector the model's final norm reads after its own tail collapses
    it, from the model's own forward with no layer run: as many stacks a pass as
    :data:`COLLAPSE_BUDGET` allows (every one at a decode step; one a pass for a long prompt),
    each freed from ``stacks`` once read. ``rest``: the items after the stack in the tuple the
    layers return (HY-v4's top-k indices), None for a bare tensor."""
    layout = streams_of(anatomy)
    batch_axis = layout.batch_seq_axes()[0]
    out: list[Any] = []
    group: list[Any] = []
    size = 0
    for i, stack in enumerate(stacks):
        if group and size + stack.numel() > COLLAPSE_BUDGET:
            out.append(_collapse_group(anatomy, group, rest, batch_axis))
            group, size = [], 0
        group.append(stack)
        size += stack.numel()
        stacks[i] = None  # the group holds it until its pass; then it is freed
    out.append(_collapse_group(anatomy, group, rest, batch_axis))
    return torch.cat(out)


def _collapse_group(anatomy: Any, group: list[Any], rest: Any, batch_axis: int) -> Any:
    stacked = torch.cat(group, dim=batch_axis)
    group.clear()
    n, seq = stacked.shape[batch_axis], stacked.shape[layer_seq_axis(anatomy)]
    holder, name = layer_list(anatomy)
    full = getattr(holder, name)
    setattr(holder, name, torch.nn.ModuleList([_Fixed(stacked, rest)]))
    try:
        with torch.inference_mode(), final_norm_read(anatomy) as read:
            anatomy.decoder(input_ids=_zeros(anatomy, n, seq), use_cache=False)
    finally:
        setattr(holder, name, full)
    return read[0]


def layer_seq_axis(anatomy: Any) -> int:
    return streams_of(anatomy).batch_seq_axes()[1]


def layer_list(anatomy: Any) -> tuple[Any, str]:
    """The module holding the decoder's list of layers, and that list's attribute name."""
    for path, module in anatomy.decoder.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == len(anatomy.layers):
            if module[0] is anatomy.layers[0]:
                parent, _, name = path.rpartition(".")
                return anatomy.decoder.get_submodule(parent), name
    raise RuntimeError("the decoder's list of layers is not where the anatomy found it")


class _Fixed(torch.nn.Module):
    """A layer that returns ``output`` (in the structure the model's layers return), whatever
    it is given: the model's tail then reads ``output`` as the last layer's."""

    def __init__(self, output: Any, rest: tuple[Any, ...] | None) -> None:
        super().__init__()
        self.output, self.rest = output, rest

    def forward(self, *_args: Any, **_kwargs: Any) -> Any:
        return self.output if self.rest is None else (self.output, *self.rest)


@contextmanager
def final_norm_read(anatomy: Any) -> Iterator[list[Any]]:
    """While open, a pass ends at the final norm, whose input is put in the yielded list."""
    norm = _final_norm(anatomy)
    read: list[Any] = []

    def grab(_m: Any, args: Any, kwargs: Any) -> None:
        read.append(args[0] if args else kwargs["hidden_states"])
        raise _Stop

    handle = norm.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        yield read
    except _Stop:
        pass
    finally:
        handle.remove()
    if not read:
        raise RuntimeError("the model's final norm was not reached")


@contextmanager
def final_norm_fed(anatomy: Any, rows: Any) -> Iterator[None]:
    """While open, the final norm reads ``rows`` (N, 1, hidden) in place of its input: the
    collapsed residual goes through the model's own norm, head and whatever follows."""

    def feed(_m: Any, args: Any, kwargs: Any) -> Any:
        if args:
            return (rows.to(args[0].dtype), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": rows.to(kwargs["hidden_states"].dtype)}

    handle = _final_norm(anatomy).register_forward_pre_hook(feed, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def _final_norm(anatomy: Any) -> Any:
    norm = anatomy.final_norm
    if not any(m is norm for m in anatomy.decoder.modules()):
        raise RuntimeError("the final norm that reads the collapsed streams was not found")
    return norm
