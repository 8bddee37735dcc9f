"""A comparison saved in a session, made again from its recorded runs for the compare view.

The :class:`~llm_lens.desktop.state.compare_controller.CompareController` feeds what
:func:`replayed_comparison` returns through the same handlers as a live comparison's items, so
the view cannot tell them apart; the metrics are recomputed from the recorded steps (every
column's full logits are in the file).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llm_lens.core.runs.jobs import CompareOutcome, CompareStart


def replayed_comparison(session: Any, saved: Any) -> tuple[CompareStart, list[Any], Any]:
    """The ``CompareStart``, the recorded runs (one per column) and the ``CompareOutcome`` of
    comparison ``saved`` of ``session``."""
    from llm_lens.core.runs.compare import Comparison, changes_prompt

    runs = [session.runs[i] for i in saved.runs]
    comparison = Comparison.recorded(runs, saved.shared_prefill_ms)
    params = tuple(comparison.params)
    samples = len({dataclasses.replace(p, seed=0) for p in params}) == 1
    ids = tuple(r.run_id for r in runs)
    changes = tuple(tuple(r.interventions) for r in runs)  # What-if columns, as saved
    own = tuple(bool(c) and changes_prompt(c, len(comparison.prompt)) for c in changes)
    comparison.own_prefill = own
    start = CompareStart(
        comparison.prompt,
        params,
        ids,
        saved.shared_prefill_ms,
        comparison.prefill_saved_ms,
        samples,
        changes,
        own,
    )  # fmt: skip
    return start, runs, CompareOutcome.of(comparison, runs)
