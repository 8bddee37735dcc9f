"""What if? Interventions on a run: one frozen, serialisable value per change to the model's
computation (:mod:`.spec`), read from SPEC strings (:mod:`.specs`), checked against the model
(:mod:`.checks`) and applied with hooks on its own modules (:mod:`.hooks`), removed when the run
ends.

The values and SPEC strings import no torch (a session file is read without it); the hooks are
imported when first named."""

from typing import TYPE_CHECKING, Any

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
    from_dict,
)
from llm_lens.core.interventions.specs import parse_spec, to_spec

if TYPE_CHECKING:
    from llm_lens.core.interventions.hooks import (
        Patcher,
        applied,
        hooked_for,
        mask_router_logits,
    )

__all__ = [
    "BlockEdit",
    "ExpertEdit",
    "Forget",
    "HeadEdit",
    "HeadPatch",
    "Intervention",
    "InterventionError",
    "Patcher",
    "ResidualAdd",
    "ResidualPatch",
    "applied",
    "from_dict",
    "hooked_for",
    "mask_router_logits",
    "parse_spec",
    "to_spec",
]

_HOOKS = ("Patcher", "applied", "hooked_for", "mask_router_logits")


def __getattr__(name: str) -> Any:
    if name in _HOOKS:
        from llm_lens.core.interventions import hooks

        return getattr(hooks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
