"""What the window shows: the run, its steps and the selection, as one frozen value.

The :class:`~llm_lens.desktop.state.controller.Controller` holds one :class:`Shown`; it and its
``live`` part are the only ones to replace it (each method that changes what is shown makes a
new value with ``dataclasses.replace``). Panes, views and the window read it through the
controller's read-only properties of the same names (``controller.steps``, ``.selected``,
``.token`` …), so no reader can change what the others see, and a value a reader kept stays as
it was.

A step arriving makes a new value whose ``steps`` is the old tuple and the new record: a copy of
the tuple's references (about ten microseconds at 4,000 steps), not of the records.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from llm_lens.core.sampling import SamplingParams


@dataclass(frozen=True, slots=True)
class Shown:
    """The shown run, its steps and the selection.

    ``info``: the model of what is shown (a recorded run's model, or the loaded one);
    ``prompt`` / ``prefill`` / ``steps`` / ``summary``: the run's ``PromptTokens``, prefill
    record, step records and ``RunSummary`` (None until it ends); ``run_params``: the run's
    ``SamplingParams``; ``run_id``: the id its records carry (late ones of another id are
    dropped); ``recorded``: the ``RecordedAnalysis`` while a session's run is shown, with
    ``session``, ``session_path`` and ``session_index`` (the run of ``session`` shown);
    ``dirty``: a live run not saved yet; ``selected``: the selected step (-1: none); ``token``:
    the selected token's position in prompt + response (-1: none, see
    :mod:`~llm_lens.desktop.state.selection`); ``follow_live``: the selection follows the
    newest step; ``interventions``: the ``core.interventions`` values the run was made under
    (() for a clean run).
    """

    info: Any = None
    prompt: Any = None
    prefill: Any = None
    steps: tuple[Any, ...] = ()
    summary: Any = None
    run_params: Any = field(default_factory=SamplingParams)
    run_id: int = 0
    recorded: Any = None
    session: Any = None
    session_path: str | None = None
    session_index: int = -1
    dirty: bool = False
    selected: int = -1
    token: int = -1
    follow_live: bool = True
    interventions: tuple[Any, ...] = ()  # what the shown run changed in the model (What if?)

    def cleared(self, **changes: Any) -> Shown:
        """No run shown (no prompt, steps or selection), with ``changes`` applied."""
        blank = {"prompt": None, "prefill": None, "steps": (), "summary": None, "selected": -1}
        return replace(self, **{**blank, "token": -1, **changes})

    def with_step(self, record: Any) -> Shown:
        """This value with ``record`` appended to its steps."""
        return replace(self, steps=self.steps + (record,))

    def current_step(self) -> Any:
        """The selected step's record, or None."""
        steps, selected = self.steps, self.selected
        return steps[selected] if 0 <= selected < len(steps) else None


FIELDS = tuple(Shown.__dataclass_fields__)


def shown_property(name: str) -> Any:
    """A read-only property of an owner's ``_shown`` field ``name`` (the controller's
    ``steps``, ``selected`` …): assigning it raises ``AttributeError``."""
    return property(attrgetter(f"_shown.{name}"), doc=f"``Shown.{name}`` (read-only).")
