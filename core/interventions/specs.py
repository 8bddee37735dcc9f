"""The CLI's SPEC strings for interventions, read and written.

::

    head:7.4=0          head 4 of layer 7 off         head:7.4*0.5   scaled
    head:7.4=mean       replaced with its mean over the prompt
    attn:12=0           layer 12's attention block off  mlp:12*0.5   its MLP scaled
    mixer:3=0           layer 3's mixer that is not attention off (Mamba, DeltaNet, convolution)
    resid:10@3-5+=v.npy the vector in v.npy added to the residual entering layer 10 at 3, 4, 5
    resid:10+=v.npy     … at every position
    resid:10+=v.npy*4   … times 4 (a steering vector with its strength; llm-lens steer)
    resid:10@3=p.npy    the residual there replaced by p.npy's row(s) (activation patching)
    expert:5.2=off      expert 2 of layer 5 forbidden  expert:5.1,3=force  only 1 and 3 routed
    forget:12           the token at position 12 hidden from every later query (in a hybrid
                        model only from its attention layers: the Mamba, DeltaNet or
                        convolution layers' state still carries it)

A malformed SPEC is one :class:`InterventionError` naming what is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

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
    _finite,
)

_HEAD = re.compile(r"head:(\d+)\.(\d+)(=0|=mean|\*(.+))$")
_BLOCK = re.compile(r"(attn|mlp|mixer):(\d+)(=0|\*(.+))$")
_RESID = re.compile(r"resid:(\d+)(?:@([\d,\-]+))?(\+?=)(.+?)(?:\*([^*/]+))?$")
_EXPERT = re.compile(r"expert:(\d+)\.([\d,]+)=(off|force)$")
_FORGET = re.compile(r"forget:(\d+)$")
Loader = Callable[[str], Any]


def parse_spec(text: str, load: Loader = np.load) -> Intervention:
    """The intervention ``text`` names; ``load`` reads a vector file (``np.load``)."""
    spec = text.strip()
    try:
        return _parse(spec, load)
    except InterventionError as exc:
        raise InterventionError(f"--intervene {spec!r}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise InterventionError(f"--intervene {spec!r}: {exc}") from None


def _parse(spec: str, load: Loader) -> Intervention:
    if m := _HEAD.match(spec):
        layer, head = int(m[1]), int(m[2])
        if m[3] == "=mean":
            return HeadEdit(layer, head, "mean")
        return HeadEdit(layer, head, "scale", 0.0 if m[3] == "=0" else _number(m[4]))
    if m := _BLOCK.match(spec):
        return BlockEdit(int(m[2]), m[1], 0.0 if m[3] == "=0" else _number(m[4]))
    if m := _RESID.match(spec):
        if m[5] is not None and m[3] != "+=":
            raise InterventionError("only an added vector takes a strength: resid:L+=FILE*S")
        strength = 1.0 if m[5] is None else _finite(_number(m[5]), "the strength")
        return _residual(int(m[1]), m[2], m[3] == "+=", m[4], load, strength)
    if m := _EXPERT.match(spec):
        return ExpertEdit(int(m[1]), tuple(int(e) for e in m[2].split(",") if e), m[3])
    if m := _FORGET.match(spec):
        return Forget(int(m[1]))
    raise InterventionError(
        "not a SPEC (head:L.H=0|=mean|*F, attn:L=0|*F, mlp:L=0|*F, mixer:L=0|*F, "
        "resid:L[@P]+=FILE, resid:L@P=FILE, expert:L.E=off|force, forget:P; "
        "resid:L+=FILE*S scales the vector)"
    )


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InterventionError(f"{text!r} is not a number") from None


def positions(text: str | None) -> tuple[int, ...]:
    """``3``, ``3-5`` or ``3,7,9-10`` as sorted positions; None or empty: ()."""
    out: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        if not low or (high == "" and "-" in part):
            raise InterventionError(f"{part!r} is not a position or range")
        first, last = int(low), int(high or low)
        if last < first:
            raise InterventionError(f"the range {part!r} runs backwards")
        out.update(range(first, last + 1))
    return tuple(sorted(out))


def _residual(
    layer: int, where: str | None, add: bool, path: str, load: Loader, strength: float = 1.0
) -> Intervention:
    spots = positions(where)
    array = np.asarray(load(path), dtype=np.float64)
    if add:
        if array.ndim != 1:
            raise InterventionError(f"{path} holds shape {array.shape}; a vector is 1-D")
        return ResidualAdd(layer, spots, tuple(array * strength))
    if not spots:
        raise InterventionError("a patch (=) names its positions: resid:L@P=FILE")
    rows = array.reshape(1, -1) if array.ndim == 1 else array
    if rows.ndim != 2 or rows.shape[0] != len(spots):
        raise InterventionError(
            f"{path} holds shape {array.shape}; the patch needs {len(spots)} rows"
        )
    return ResidualPatch(layer, spots, tuple(tuple(r) for r in rows))


def to_spec(item: Intervention) -> str:
    """The SPEC string for ``item`` (a residual's numbers are summarised, not written)."""
    if isinstance(item, HeadEdit):
        how = "=mean" if item.op == "mean" else "=0" if item.factor == 0 else f"*{item.factor:g}"
        return f"head:{item.layer}.{item.head}{how}"
    if isinstance(item, HeadPatch):
        at = ",".join(map(str, item.positions))
        return f"head:{item.layer}.{item.head}@{at}=<{len(item.values[0])} numbers each>"
    if isinstance(item, BlockEdit):
        return f"{item.part}:{item.layer}" + ("=0" if item.factor == 0 else f"*{item.factor:g}")
    if isinstance(item, ResidualAdd | ResidualPatch):
        at = f"@{','.join(map(str, item.positions))}" if item.positions else ""
        size = len(item.vector) if isinstance(item, ResidualAdd) else len(item.values[0])
        op = "+=" if isinstance(item, ResidualAdd) else "="
        return f"resid:{item.layer}{at}{op}<{size} numbers>"
    if isinstance(item, ExpertEdit):
        return f"expert:{item.layer}.{','.join(map(str, item.experts))}={item.op}"
    if isinstance(item, Forget):
        return f"forget:{item.position}"
    raise TypeError(f"not an intervention: {item!r}")
