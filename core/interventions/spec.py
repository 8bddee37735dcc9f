"""Interventions as data: one frozen value per change to the model's computation.

Each kind is a frozen dataclass of plain numbers (vectors as tuples of floats), so it can be
compared, hashed, written to JSON (:meth:`to_dict`) and read back (:func:`from_dict`). Nothing
here touches a model; :mod:`llm_lens.core.interventions.hooks` applies them, and
:mod:`llm_lens.core.interventions.specs` reads and writes the CLI's SPEC strings.

Positions are absolute positions in the run's context (0 is the first prompt token); an empty
``positions`` means every position.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from llm_lens.core.errors import LensError


class InterventionError(LensError):
    """An intervention that cannot be applied as written (a user mistake: CLI exit 2)."""


def _finite(value: float, what: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise InterventionError(f"{what} must be a finite number, got {value!r}")
    return number


def _vector(values: Iterable[float], what: str) -> tuple[float, ...]:
    vec = np.asarray(list(values), dtype=np.float64).ravel()
    if not np.isfinite(vec).all():
        raise InterventionError(f"{what} holds NaN or Inf")
    return tuple(float(v) for v in vec)


def _positions(values: Iterable[int]) -> tuple[int, ...]:
    out = tuple(sorted({int(v) for v in values}))
    if out and out[0] < 0:
        raise InterventionError(f"positions count from 0; got {out[0]}")
    return out


@dataclass(frozen=True)
class Intervention:
    """What every kind shares: its kind's name and its dict form (its SPEC string is
    :func:`~llm_lens.core.interventions.specs.to_spec`)."""

    kind: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-able dict: ``{"kind": ..., field: value, ...}``."""
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        return {"kind": self.kind} | data


@dataclass(frozen=True)
class HeadEdit(Intervention):
    """Head ``head`` of layer ``layer``: its slice of the input to the attention block's output
    projection zeroed (``op="scale"`` with factor 0), scaled by ``factor``, or replaced with its
    mean over the prompt (``op="mean"``)."""

    kind: ClassVar[str] = "head"
    layer: int
    head: int
    op: str = "scale"  # "scale" or "mean"
    factor: float = 0.0

    def __post_init__(self) -> None:
        if self.op not in ("scale", "mean"):
            raise InterventionError(f"a head's op is scale or mean, got {self.op!r}")
        object.__setattr__(self, "factor", _finite(self.factor, "a head's factor"))


BLOCK_PARTS = ("attn", "mlp", "mixer")  # what a BlockEdit scales: attention, MLP, other mixer


@dataclass(frozen=True)
class HeadPatch(Intervention):
    """Head ``head`` of layer ``layer``: its output (its slice of the input to the output
    projection) at each of ``positions`` replaced by the row of ``values`` for it, the same
    head's output at the same place in another prompt's run (a patching sweep's head cell)."""

    kind: ClassVar[str] = "head_patch"
    layer: int
    head: int
    positions: tuple[int, ...]
    values: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        rows = tuple(_vector(row, "a patched head output") for row in self.values)
        if len(rows) != len(self.positions) or not self.positions:
            raise InterventionError(
                f"a head patch needs one row per position: {len(self.positions)} positions, "
                f"{len(rows)} rows"
            )
        if len(self.positions) != len(set(self.positions)) or min(self.positions) < 0:
            raise InterventionError("a head patch's positions are distinct and count from 0")
        object.__setattr__(self, "values", rows)


@dataclass(frozen=True)
class BlockEdit(Intervention):
    """Layer ``layer``'s attention block (``part="attn"``), MLP (``"mlp"``) or token mixer that
    is not attention (``"mixer"``: a hybrid layer's Mamba, DeltaNet or short convolution): its
    output multiplied by ``factor`` (0 turns it off)."""

    kind: ClassVar[str] = "block"
    layer: int
    part: str
    factor: float = 0.0

    def __post_init__(self) -> None:
        if self.part not in BLOCK_PARTS:
            raise InterventionError(f"a block is attn, mlp or mixer, got {self.part!r}")
        object.__setattr__(self, "factor", _finite(self.factor, f"the {self.part} factor"))


@dataclass(frozen=True)
class ResidualAdd(Intervention):
    """``vector`` added to the residual stream entering layer ``layer`` at ``positions``."""

    kind: ClassVar[str] = "resid_add"
    layer: int
    positions: tuple[int, ...]
    vector: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", _positions(self.positions))
        object.__setattr__(self, "vector", _vector(self.vector, "the residual vector"))


@dataclass(frozen=True)
class ResidualPatch(Intervention):
    """The residual stream entering layer ``layer`` at each of ``positions`` replaced by the row
    of ``values`` for it (the same place in another prompt's run: activation patching)."""

    kind: ClassVar[str] = "resid_patch"
    layer: int
    positions: tuple[int, ...]
    values: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        rows = tuple(_vector(row, "a patched residual") for row in self.values)
        if len(rows) != len(self.positions) or not self.positions:
            raise InterventionError(
                f"a patch needs one row per position: {len(self.positions)} positions, "
                f"{len(rows)} rows"
            )
        if len(self.positions) != len(set(self.positions)) or min(self.positions) < 0:
            raise InterventionError("a patch's positions are distinct and count from 0")
        object.__setattr__(self, "values", rows)


@dataclass(frozen=True)
class ExpertEdit(Intervention):
    """Layer ``layer``'s MoE router: ``op="off"`` forbids ``experts`` (their router logits
    masked), ``op="force"`` routes only to them (every other expert's logit masked)."""

    kind: ClassVar[str] = "expert"
    layer: int
    experts: tuple[int, ...]
    op: str = "off"

    def __post_init__(self) -> None:
        if self.op not in ("off", "force"):
            raise InterventionError(f"an expert's op is off or force, got {self.op!r}")
        experts = tuple(sorted({int(e) for e in self.experts}))
        if not experts or experts[0] < 0:
            raise InterventionError("name at least one expert, counting from 0")
        object.__setattr__(self, "experts", experts)


@dataclass(frozen=True)
class Forget(Intervention):
    """The token at ``position`` hidden from every later query, at every attention layer (its
    key masked out of their attention, as an attention mask with a 0 there would); a hybrid
    model's Mamba, DeltaNet or convolution layers take no mask: their state still carries it."""

    kind: ClassVar[str] = "forget"
    position: int

    def __post_init__(self) -> None:
        if int(self.position) < 0:
            raise InterventionError(f"positions count from 0; got {self.position}")


KINDS: dict[str, type[Intervention]] = {
    k.kind: k
    for k in (HeadEdit, HeadPatch, BlockEdit, ResidualAdd, ResidualPatch, ExpertEdit, Forget)
}


def from_dict(data: Mapping[str, Any]) -> Intervention:
    """The intervention a :meth:`Intervention.to_dict` dict describes."""
    kind = KINDS.get(str(data.get("kind")))
    if kind is None:
        raise InterventionError(f"unknown intervention kind {data.get('kind')!r}")
    fields = {k: v for k, v in data.items() if k != "kind"}
    for name in ("positions", "vector", "experts"):
        if name in fields:
            fields[name] = tuple(fields[name])
    if "values" in fields:
        fields["values"] = tuple(tuple(row) for row in fields["values"])
    try:
        return kind(**fields)
    except TypeError as exc:
        raise InterventionError(f"a {kind.kind} intervention: {exc}") from None
