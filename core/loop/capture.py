"""Hooks and the attention tap that record the residual stream and attention while the model runs.

Hooks keep references to tensors the model produces anyway; nothing is copied inside the
forward pass except each layer's last attention row. After the pass the loop copies what the
panes need to numpy once.
"""

from __future__ import annotations

from contextlib import ExitStack
from functools import partial
from typing import Any

import numpy as np
import torch

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.attention import Tap, tapping
from llm_lens.core.streams import collapse, streams_of

EMBEDDINGS = "the embeddings (the first layer's input)"
PASS_THROUGH = (torch.nn.Dropout, torch.nn.Identity)  # children whose output is their input
NORM_WORDS = ("norm", "ln")
MLP_WORDS = ("mlp", "ffn", "feed_forward", "moe", "expert", "fc", "dense", "act", "proj")
MIXER_WORDS = ("mixer", "mamba", "ssm", "conv", "linear_attn", "recurrent")


def sublayer_name(name: str, module: Any, attention: Any) -> str:
    """What a decoder layer's child is, for a message: "attention", "mixer" (a layer's token
    mixer that is not attention: Mamba, convolution, linear attention), "MLP", "norm (NAME)",
    or its own name."""
    low = name.lower()
    if module is attention:
        return "attention" if "attention" in type(module).__name__.lower() else f"mixer ({name})"
    if any(w in low for w in MIXER_WORDS):
        return f"mixer ({name})"
    if any(w in low for w in NORM_WORDS) or "norm" in type(module).__name__.lower():
        return f"norm ({name})"
    if any(w in low for w in MLP_WORDS):
        return "MLP"
    return name


def layer_output(index: int) -> str:
    return f"layer {index}'s output (its residual sum)"


class Probe:
    """One stage's output in the order the pass computed it, kept to find where a NaN or Inf
    first appeared: a one-position output itself (a reference; nothing is computed), a longer
    one reduced to its per-position (min, max), which NaN and ±Inf both survive."""

    __slots__ = ("where", "kept")

    def __init__(self, where: str, output: Any) -> None:
        self.where = where
        if output.dim() >= 2 and output.shape[-2] > 1:
            low, high = torch.aminmax(output, dim=-1)
            output = torch.stack((low, high), dim=-1)  # (..., seq, 2)
        self.kept = output.detach()


class Capture:
    """Context manager: the first layer's real input, each layer's output, each attention
    block's output, and (through :class:`~llm_lens.core.attention.Tap`) each layer's
    last-query attention probabilities.

    The residual row 0 is what the first layer receives, so GPT-2's position table and Granite's
    embedding multiplier are in it. ``fast`` runs the real attention with SDPA (long prompts).
    """

    def __init__(self, anatomy: Anatomy, fast: bool = False, probe: bool = False) -> None:
        self.anatomy = anatomy
        self.probing = probe  # also keep every sublayer's output (:class:`Probe`), in order
        self.hidden: list[
            Any
        ] = []  # layers + 1 tensors (1, seq, hidden); a prompt's: (1, 1, hidden)
        # a prompt's residual stream at every position, copied out layer by layer as the pass
        # goes, so each layer's output is freed once the next has read it (at 8,192 tokens the
        # kept outputs and their stack were 2 × 585 MB at once)
        self._positions: np.ndarray | None = None
        # layers tensors (hidden,): each layer's token mixer's output at the last position (its
        # attention's, or its Mamba, DeltaNet or convolution mixer's where it has no attention)
        self.attn_out: list[Any] = []
        self.tap = Tap(anatomy.layer_of, fast=fast, rows=True)
        self.probes: list[Probe] = []  # every stage's output, in the order computed
        self._last: tuple[Any, Any] | None = None
        # a model whose residual is several parallel streams (core.streams): each stream stack
        # as the pass produced it, collapsed after the pass into the vector the model's own
        # tail reads (the hooks cannot run the model again inside its pass)
        self._stacks: list[Any] = []
        self._rest: tuple[Any, ...] | None = None  # what the layers return after the stack
        self._handles: list[Any] = []
        self._stack = ExitStack()

    @property
    def attn_rows(self) -> list[Any | None]:
        """Per layer, the last query's probabilities (heads, kv), or None where not recorded
        (a layer without attention: :meth:`Anatomy.has_attention`)."""
        return [self.tap.last_rows.get(i) for i in range(len(self.anatomy.layers))]

    def __enter__(self) -> Capture:
        a = self.anatomy
        if self.probing:
            streams_of(a)  # found now: a probe pass cannot run inside the model's own pass
        first = a.layers[0].register_forward_pre_hook(self._on_input, with_kwargs=True)
        self._handles.append(first)
        for i, layer in enumerate(a.layers):
            if self.probing:
                self._probe_children(i, layer)
            self._handles.append(layer.register_forward_hook(partial(self._on_hidden, i)))
        for mixer in dict.fromkeys(a.mixers):  # a layer's attention, or its Mamba/conv mixer
            self._handles.append(mixer.register_forward_hook(self._on_attn))
        if self.probing:
            final = partial(self._on_probe, "the final norm's output")
            self._handles.append(a.final_norm.register_forward_hook(final))
        self._stack.enter_context(tapping(self.tap))
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._stack.close()
        stacks, self._stacks = self._stacks, []
        if stacks and kind is None:
            for row in collapse(self.anatomy, stacks, self._rest).split(1):
                self._keep(row)  # (1, seq, hidden), in the order the pass made them

    @property
    def prompt_positions(self) -> np.ndarray | None:
        """A pass over several positions: its residual stream at each, copied as it ran
        ((layers + 1, seq, hidden) float32); None for a pass over one."""
        return self._positions

    def _probe_children(self, index: int, layer: Any) -> None:
        """Hook each child of decoder layer ``index`` (its norms, attention or mixer, MLP) so
        a NaN is placed in the sublayer that first computed it."""
        attention = self.anatomy.mixers[index]
        for name, child in layer.named_children():
            if isinstance(child, PASS_THROUGH) or isinstance(child, torch.nn.ModuleList):
                continue
            where = f"layer {index}'s {sublayer_name(name, child, attention)} output"
            self._handles.append(child.register_forward_hook(partial(self._on_probe, where)))

    def _on_probe(self, where: str, _module: Any, _inputs: Any, output: Any) -> None:
        out = _first_tensor(output)
        if out is not None:
            self.probes.append(Probe(where, out))

    def _on_input(self, _module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        h = args[0] if args else kwargs["hidden_states"]
        if self.probing:
            self.probes.append(Probe(EMBEDDINGS, self._per_position(h)))
        self._keep(h)

    def _on_hidden(self, index: int, _module: Any, _inputs: Any, output: Any) -> None:
        h = _first_tensor(output)
        if isinstance(output, tuple) and h is not None and h.dim() == 4:
            self._rest = tuple(output[1:])
        if self.probing:
            self.probes.append(Probe(layer_output(index), self._per_position(h)))
        self._keep(h)

    def _per_position(self, h: Any) -> Any:
        """``h`` as (batch, seq, hidden) for a :class:`Probe`: a stack of parallel streams
        reduced over them (the largest magnitude: NaN and ±Inf survive), so a stream is not
        counted as a position."""
        if h.dim() != 4:
            return h
        return torch.amax(h.abs(), dim=streams_of(self.anatomy).axis)

    def _keep(self, h: Any) -> None:
        """Keep one residual-stream tensor (1, seq, hidden); a prompt's (seq > 1, one sequence)
        is copied to ``_positions`` at once and only its last row kept as a tensor. A stack of
        parallel streams (4-D) is kept whole until the pass ends (:func:`collapse`)."""
        if h.dim() == 4:
            self._stacks.append(h)
            return
        if h.shape[0] == 1 and h.shape[1] > 1:
            if self._positions is None:
                rows = (len(self.anatomy.layers) + 1, h.shape[1], h.shape[2])
                self._positions = np.empty(rows, np.float32)  # (layers + 1, seq, hidden)
            self._positions[len(self.hidden)] = h[0].float().cpu().numpy()
            h = h[:, -1:].clone()
        self.hidden.append(h)

    def _on_attn(self, _module: Any, _inputs: Any, output: Any) -> None:
        out = output[0] if isinstance(output, tuple | list) else output  # GPT-1: a list
        self.attn_out.append(out[0, -1].clone())  # (hidden,)

    def last_position(self) -> tuple[Any, Any]:
        """(layers + 1, hidden) residual stream and (layers, hidden) attention updates, stacked
        once (the finiteness check and the record both read them)."""
        if self._last is None:
            self._last = (torch.stack([h[0, -1] for h in self.hidden]), torch.stack(self.attn_out))
        return self._last

    def all_positions(self) -> Any:
        """(layers + 1, seq, hidden) residual stream at every position."""
        if self._positions is not None:
            return torch.from_numpy(self._positions)
        return torch.stack([h[0] for h in self.hidden])

    def take_positions(self) -> np.ndarray:
        """:meth:`all_positions` as a read-only float32 array, not copied (585 MB at 8,192
        tokens); runs that share one prefill share it."""
        if self._positions is None:
            self._positions = torch.stack([h[0] for h in self.hidden]).float().cpu().numpy()
        self._positions.setflags(write=False)
        return self._positions


def _first_tensor(output: Any) -> Any | None:
    """A module's output tensor: itself, or the first item of the tuple it returned."""
    if isinstance(output, tuple | list):
        output = output[0] if output else None
    return output if isinstance(output, torch.Tensor) else None
