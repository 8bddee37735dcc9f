"""Where a model first computed NaN or Inf, as a record the trace JSON, the CLI and the window's
panes share (torch-free: the window reads it from the error's one line).

:class:`~llm_lens.core.errors.NonFiniteError` names the stage as text ("layer 1's MLP output");
:class:`NonFinite` splits it into the layer (None for the embeddings and the head) and the
sublayer (attention, MLP, mixer, a norm, the layer's output, the embeddings, the head).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llm_lens.core.errors import NonFiniteError

_LAYER = re.compile(r"^layer (\d+)'s (?:(.+?) )?output(?: \(its residual sum\))?$")
_LINE = re.compile(
    r"the model computed (NaN|Inf) at step (\d+): first in (.+?)"
    r"(?: \(positions? ([0-9, \-]+(?: and \d+ more)?)\))?; its numbers are broken"
)


@dataclass(frozen=True)
class NonFinite:
    """The first NaN or Inf of a run: at which step, in which layer and sublayer."""

    step: int
    value: str  # "NaN" or "Inf"
    where: str  # the stage as the error names it
    layer: int | None  # None: before the first layer (embeddings) or after the last (the head)
    sublayer: str  # "attention", "MLP", "norm (…)", "mixer …", "output", "embeddings", "head"
    positions: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "value": self.value,
            "layer": self.layer,
            "sublayer": self.sublayer,
            "where": self.where,
            "positions": list(self.positions),
        }

    @property
    def label(self) -> str:
        """A short mark for a pane: "NaN in layer 1's MLP (step 0)"."""
        place = f"layer {self.layer}'s {self.sublayer}" if self.layer is not None else self.where
        return f"{self.value} first in {place} (step {self.step})"


def placed(exc: NonFiniteError) -> NonFinite:
    """The record of an error raised by the engine's check."""
    layer, sublayer = split_where(exc.where)
    return NonFinite(exc.step, exc.value, exc.where, layer, sublayer, tuple(exc.positions))


def from_message(message: str) -> NonFinite | None:
    """The record read back from a :class:`NonFiniteError`'s one line (what the window's
    status bar receives); None for any other message."""
    found = _LINE.search(message)
    if found is None:
        return None
    value, step, where, _positions = found.groups()
    layer, sublayer = split_where(where)
    return NonFinite(int(step), value, where, layer, sublayer)


def split_where(where: str) -> tuple[int | None, str]:
    """(layer, sublayer) of a stage's name."""
    found = _LAYER.match(where)
    if found is not None:
        return int(found.group(1)), found.group(2) or "output"
    if "embeddings" in where:
        return None, "embeddings"
    return None, "head"
