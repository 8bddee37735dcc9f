"""Forward hooks that record the residual stream and attention while the model runs.

Hooks keep references to tensors the model produces anyway; nothing is copied inside the
forward pass. After the pass the loop copies what the panes need to numpy once.
"""

from __future__ import annotations

from typing import Any

import torch

from llm_lens.core.anatomy import Anatomy


class Capture:
    """Context manager: hooks on the embedding, each layer and each attention block.

    ``last_only`` keeps only the last query position (decode steps); otherwise every position is
    kept for the residual stream and only the last attention row (the full maps are on demand).
    """

    def __init__(self, anatomy: Anatomy) -> None:
        self.anatomy = anatomy
        self.hidden: list[Any] = []  # layers + 1 tensors (1, seq, hidden)
        self.attn_out: list[Any] = []  # layers tensors (hidden,): the last position
        self.attn_rows: list[Any] = []  # layers tensors (heads, kv_len) or None
        self._handles: list[Any] = []

    def __enter__(self) -> Capture:
        a = self.anatomy
        self._handles.append(a.embed.register_forward_hook(self._on_hidden))
        for layer in a.layers:
            self._handles.append(layer.register_forward_hook(self._on_hidden))
        for attn in a.attn:
            self._handles.append(attn.register_forward_hook(self._on_attn))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _on_hidden(self, _module: Any, _inputs: Any, output: Any) -> None:
        self.hidden.append(output[0] if isinstance(output, tuple) else output)

    def _on_attn(self, _module: Any, _inputs: Any, output: Any) -> None:
        # copies, not views: a view of the prefill's (1, heads, T, T) weights would keep every
        # layer's full map alive until the pass ends (30 × 36 MB at T = 1000)
        self.attn_out.append(output[0][0, -1].clone())  # (hidden,)
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        # (batch, heads, q, kv) -> the last query's row (heads, kv)
        self.attn_rows.append(None if weights is None else weights[0, :, -1, :].clone())

    def last_position(self) -> tuple[Any, Any]:
        """(layers + 1, hidden) residual stream and (layers, hidden) attention updates."""
        hidden = torch.stack([h[0, -1] for h in self.hidden])
        updates = torch.stack(self.attn_out)
        return hidden, updates

    def all_positions(self) -> Any:
        """(layers + 1, seq, hidden) residual stream at every position."""
        return torch.stack([h[0] for h in self.hidden])
