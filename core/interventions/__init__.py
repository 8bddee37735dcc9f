"""What if? Interventions on a run: one frozen, serialisable value per change to the model's
computation (:mod:`.spec`), read from SPEC strings (:mod:`.specs`), checked against the model
(:mod:`.checks`) and applied with hooks on its own modules (:mod:`.hooks`), removed when the run
ends."""

from llm_lens.core.interventions.hooks import Patcher, applied, mask_router_logits
from llm_lens.core.interventions.spec import (
    BlockEdit,
    ExpertEdit,
    Forget,
    HeadEdit,
    Intervention,
    InterventionError,
    ResidualAdd,
    ResidualPatch,
    from_dict,
)
from llm_lens.core.interventions.specs import parse_spec, to_spec

__all__ = [
    "BlockEdit",
    "ExpertEdit",
    "Forget",
    "HeadEdit",
    "Intervention",
    "InterventionError",
    "Patcher",
    "ResidualAdd",
    "ResidualPatch",
    "applied",
    "from_dict",
    "mask_router_logits",
    "parse_spec",
    "to_spec",
]
