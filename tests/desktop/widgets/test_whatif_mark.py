"""widgets/whatif_mark: the What-if line shows only for an intervened run, routing differences
count choices as sets, the lost choices are the clean run's cells, and clean steps are looked up
only where a clean run keeps them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from llm_lens.core.interventions import Forget
from llm_lens.desktop.state.whatif import CLEAN_STEPS
from llm_lens.desktop.widgets.whatif_mark import (
    WhatIfMark,
    clean_steps,
    lost_choices,
    routing_changes,
    time_difference,
)


def test_the_line_shows_for_an_intervened_run_only(qtbot) -> None:
    mark = WhatIfMark()
    qtbot.addWidget(mark)
    mark.show()
    mark.show_run((Forget(3),), "what changed here")
    assert mark.isVisible() and mark.text() == "intervened: forget token 3 · what changed here"
    mark.show_run((), "what changed here")
    assert not mark.isVisible() and mark.text() == ""


def _routing(experts: list) -> SimpleNamespace:
    return SimpleNamespace(experts=np.array(experts))  # (layers, rows, k)


def test_routing_changes_compare_sets_and_lost_choices_are_the_clean_cells() -> None:
    ours = _routing([[[0, 1], [2, 3]], [[1, 0], [3, 2]]])
    clean = _routing([[[1, 0], [2, 1]], [[0, 1], [3, 2]]])
    assert routing_changes(ours, clean) == (1, 4)  # order within a set does not count
    row = _routing([[[0, 2]], [[1, 3]]])  # one token, two layers
    clean_row = _routing([[[0, 1]], [[1, 3]]])
    xs, ys = lost_choices(row, clean_row)
    assert list(xs) == [1.5] and list(ys) == [0.5]  # expert 1 at layer row 0: lost


def test_clean_steps_look_only_where_a_clean_run_keeps_them() -> None:
    asked = []
    pane = SimpleNamespace(
        controller=SimpleNamespace(interventions=(Forget(1),)),
        clean_step=lambda s: asked.append(s.index) or s.index,
    )
    steps = [SimpleNamespace(index=i) for i in (0, CLEAN_STEPS - 1, CLEAN_STEPS)]
    assert clean_steps(pane, steps) == [0, CLEAN_STEPS - 1, None]
    assert asked == [0, CLEAN_STEPS - 1]
    pane.controller.interventions = ()
    assert clean_steps(pane, steps) == [None] * 3


def test_time_difference_names_both_runs() -> None:
    step = SimpleNamespace(index=2, timing=SimpleNamespace(wall_ms=30.0))
    clean = SimpleNamespace(timing=SimpleNamespace(wall_ms=25.5))
    assert "step 2 took 30.0 ms, the clean run's 25.5 ms (+4.5 ms" in time_difference(step, clean)
    assert "no clean run" in time_difference(step, None)
