"""Checking interventions against the model they will be applied to, before any pass runs:
a layer that does not exist, a head out of range, a vector of the wrong size, an expert the
router does not have. Each is one :class:`InterventionError` naming the problem."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.interventions.places import Sizes, block_of, out_projection, router_of
from llm_lens.core.interventions.spec import (
    BlockEdit,
    ExpertEdit,
    HeadEdit,
    HeadPatch,
    Intervention,
    InterventionError,
    ResidualAdd,
    ResidualPatch,
)
from llm_lens.core.interventions.specs import to_spec


def check(items: Sequence[Intervention], model: Any, anatomy: Anatomy) -> None:
    """Raise :class:`InterventionError` for the first item ``model`` cannot take."""
    if not items:
        return
    sizes = Sizes.of(model, anatomy)
    for item in items:
        check_one(item, sizes)
        _find(item, model, anatomy)


def _find(item: Intervention, model: Any, anatomy: Anatomy) -> None:
    """The module ``item`` hooks exists (one clear error now, not mid-run)."""
    if isinstance(item, HeadEdit | HeadPatch):
        module = out_projection(anatomy, item.layer)
        if isinstance(item, HeadPatch):
            _check_head_rows(item, module, Sizes.of(model, anatomy).heads_in(item.layer))
    elif isinstance(item, BlockEdit):
        block_of(anatomy, item.layer, item.part)
    elif isinstance(item, ExpertEdit):
        router_of(model, item.layer)


def _check_head_rows(item: HeadPatch, projection: Any, heads: int) -> None:
    """A head patch's rows are as wide as one head's slice of the projection's input (a
    Linear's ``in_features``, GPT-2's Conv1D's ``nx``)."""
    width = getattr(projection, "in_features", None) or getattr(projection, "nx", None)
    if width is None:
        return
    if any(len(r) * heads != int(width) for r in item.values):
        raise InterventionError(
            f"{to_spec(item)}: rows must have {int(width) // heads} numbers (one head's output)"
        )


def check_one(item: Intervention, sizes: Sizes) -> None:
    layer = getattr(item, "layer", None)
    if layer is not None and not 0 <= layer < sizes.layers:
        raise InterventionError(
            f"{to_spec(item)}: no layer {layer} (the model has layers 0-{sizes.layers - 1})"
        )
    if isinstance(item, HeadEdit | HeadPatch) and not 0 <= item.head < sizes.heads_in(item.layer):
        where = f"layer {item.layer} has" if sizes.layer_heads else "layers have"
        raise InterventionError(
            f"{to_spec(item)}: no head {item.head} ({where} heads "
            f"0-{sizes.heads_in(item.layer) - 1})"
        )
    widths = sizes.row_widths  # (hidden,), or also hidden × streams (core.streams)
    wanted = " or ".join(str(w) for w in widths)
    if isinstance(item, ResidualAdd) and len(item.vector) not in widths:
        raise InterventionError(
            f"{to_spec(item)}: the vector has {len(item.vector)} numbers; "
            f"the residual stream has {wanted}"
        )
    if isinstance(item, ResidualPatch) and any(len(r) not in widths for r in item.values):
        raise InterventionError(f"{to_spec(item)}: rows must have {wanted} numbers")
    if isinstance(item, ExpertEdit):
        count = sizes.experts.get(item.layer)
        if count is None:
            raise InterventionError(f"{to_spec(item)}: layer {item.layer} has no experts")
        if item.experts[-1] >= count:
            raise InterventionError(
                f"{to_spec(item)}: no expert {item.experts[-1]} (experts 0-{count - 1})"
            )
