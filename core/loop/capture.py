"""Hooks and the attention tap that record the residual stream and attention while the model runs.

Hooks keep references to tensors the model produces anyway; nothing is copied inside the
forward pass except each layer's last attention row. After the pass the loop copies what the
panes need to numpy once.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import numpy as np
import torch

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.attention import Tap, tapping


class Capture:
    """Context manager: the first layer's real input, each layer's output, each attention
    block's output, and (through :class:`~llm_lens.core.attention.Tap`) each layer's
    last-query attention probabilities.

    The residual row 0 is what the first layer receives, so GPT-2's position table and Granite's
    embedding multiplier are in it. ``fast`` runs the real attention with SDPA (long prompts).
    """

    def __init__(self, anatomy: Anatomy, fast: bool = False) -> None:
        self.anatomy = anatomy
        self.hidden: list[
            Any
        ] = []  # layers + 1 tensors (1, seq, hidden); a prompt's: (1, 1, hidden)
        # a prompt's residual stream at every position, copied out layer by layer as the pass
        # goes, so each layer's output is freed once the next has read it (at 8,192 tokens the
        # kept outputs and their stack were 2 × 585 MB at once)
        self._positions: np.ndarray | None = None
        self.attn_out: list[Any] = []  # layers tensors (hidden,): the last position
        self.tap = Tap(anatomy.layer_of, fast=fast, rows=True)
        self._handles: list[Any] = []
        self._stack = ExitStack()

    @property
    def attn_rows(self) -> list[Any | None]:
        """Per layer, the last query's probabilities (heads, kv), or None where not recorded."""
        return [self.tap.last_rows.get(i) for i in range(len(self.anatomy.layers))]

    def __enter__(self) -> Capture:
        a = self.anatomy
        first = a.layers[0].register_forward_pre_hook(self._on_input, with_kwargs=True)
        self._handles.append(first)
        for layer in a.layers:
            self._handles.append(layer.register_forward_hook(self._on_hidden))
        for attn in a.attn:
            self._handles.append(attn.register_forward_hook(self._on_attn))
        self._stack.enter_context(tapping(self.tap))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._stack.close()

    def _on_input(self, _module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._keep(args[0] if args else kwargs["hidden_states"])

    def _on_hidden(self, _module: Any, _inputs: Any, output: Any) -> None:
        self._keep(output[0] if isinstance(output, tuple) else output)

    def _keep(self, h: Any) -> None:
        """Keep one residual-stream tensor (1, seq, hidden); a prompt's (seq > 1, one sequence)
        is copied to ``_positions`` at once and only its last row kept as a tensor."""
        if h.shape[0] == 1 and h.shape[1] > 1:
            if self._positions is None:
                rows = (len(self.anatomy.layers) + 1, h.shape[1], h.shape[2])
                self._positions = np.empty(rows, np.float32)  # (layers + 1, seq, hidden)
            self._positions[len(self.hidden)] = h[0].float().cpu().numpy()
            h = h[:, -1:].clone()
        self.hidden.append(h)

    def _on_attn(self, _module: Any, _inputs: Any, output: Any) -> None:
        out = output[0] if isinstance(output, tuple) else output
        self.attn_out.append(out[0, -1].clone())  # (hidden,)

    def last_position(self) -> tuple[Any, Any]:
        """(layers + 1, hidden) residual stream and (layers, hidden) attention updates."""
        hidden = torch.stack([h[0, -1] for h in self.hidden])
        updates = torch.stack(self.attn_out)
        return hidden, updates

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
