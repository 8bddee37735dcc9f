"""``controller.sweep`` on tiny random models loaded from a folder as a user would (a Llama, and
a hybrid whose layers are not all attention): the sweep on the model thread equals core's
``patching_sweep`` of the same ids; the maps draw it, a layer without heads is blank, says so on
hover, and takes no click; a clicked head cell's patch reaches the What-if list."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PySide6.QtCore import QObject, Signal

from llm_lens.core.interventions import HeadPatch
from llm_lens.core.interventions.sweep import Metric, patching_sweep
from llm_lens.desktop.panes.sweep.maps import SweepMaps
from llm_lens.desktop.state.sweep import SweepAsk
from tests.families import family_model
from tests.hybrid_families import hybrid_model

CLEAN = "The Eiffel Tower is in the city of"
CORRUPT = "The Leaning Tower is in the city of"  # as many tokens


@pytest.mark.parametrize("name", ["llama3", "lfm2"])
def test_the_sweep_of_a_tiny_family_equals_core_and_draws(
    qtbot: Any, bare: Any, tokenizer: Any, tmp_path: Path, name: str
) -> None:
    build = hybrid_model if name == "lfm2" else family_model
    build(name, tokenizer).model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with qtbot.waitSignal(bare.sig_model_loaded, timeout=120_000):
        bare.request_load(str(tmp_path))
    runner = bare.sweep
    with qtbot.waitSignal(runner.sig_finished, timeout=120_000) as done:
        assert runner.request(SweepAsk(CLEAN, CORRUPT, False, " Paris", " Rome"))
    sweep = done.args[0]
    engine = bare.worker.workbench.engine
    clean, corrupt = (engine.tokenize(t, chat=False).ids for t in (CLEAN, CORRUPT))
    ids = [engine.tokenizer.encode(t, add_special_tokens=False)[0] for t in (" Paris", " Rome")]
    with torch.inference_mode():
        ref = patching_sweep(engine.model, clean, corrupt, Metric(*ids), engine.anatomy)
    np.testing.assert_array_equal(sweep.result.residual, ref.residual)
    np.testing.assert_array_equal(sweep.result.heads, ref.heads)
    maps = SweepMaps()
    qtbot.addWidget(maps)
    maps.show_sweep(sweep)
    clicked: list[tuple[str, int, int]] = []
    maps.sig_cell_clicked.connect(lambda *cell: clicked.append(cell))
    blank = [n for n in range(ref.heads.shape[0]) if math.isnan(ref.heads[n, 0])]
    if blank:  # a layer without attention: no value, a line that says why, no click
        assert "has no attention heads" in maps.cell_text("heads", blank[0], 0)
        maps.images["heads"].sig_clicked.emit(blank[0] + 0.5, 0.5)
        assert clicked == []
    layer = next(n for n in range(ref.heads.shape[0]) if n not in blank)
    maps.images["heads"].sig_clicked.emit(layer + 0.5, 1.5)
    assert clicked == [("heads", layer, 1)]
    with qtbot.waitSignal(runner.sig_applied, timeout=60_000):
        runner.apply(*clicked[0])
    added = bare.whatif.active()[-1]
    assert isinstance(added, HeadPatch) and (added.layer, added.head) == (layer, 1)
    assert added.positions == tuple(range(len(clean)))


def test_the_words_of_a_sweep() -> None:
    """What a request lacks is one line; a cell's share of the gap; a head patch's reading."""
    from llm_lens.core.interventions.sweep import SweepResult
    from llm_lens.desktop.state.sweep import SweepMap, ask_problem
    from llm_lens.desktop.state.whatif import describe, head_change

    assert ask_problem(SweepAsk(CLEAN, " ")).startswith("type a corrupted prompt")
    assert ask_problem(SweepAsk("", CORRUPT)).startswith("type a clean prompt")
    assert ask_problem(SweepAsk(CLEAN, CORRUPT, other=" Rome")).startswith("name the answer")
    assert ask_problem(SweepAsk(CLEAN, CORRUPT)) == ""
    grid = np.zeros((1, 1))
    result = SweepResult(Metric(1, 2), 3.0, -1.0, grid, grid)
    sweep = SweepMap(SweepAsk(CLEAN, CORRUPT), result, ("a",), ("b",), "m", 0.1)
    assert sweep.restored(1.0) == 0.5 and sweep.restored(-1.0) == 0.0
    assert math.isnan(sweep.restored(math.nan))
    patch = HeadPatch(7, 2, (0, 1), ((1.0,), (2.0,)))
    assert describe(patch) == "head 7.2 patched"
    assert head_change([patch], 7, 2) == "intervened: head 7.2 patched"
    assert head_change([patch], 7, 3) == ""
    from llm_lens.core.interventions import HeadEdit
    from llm_lens.desktop.state.whatif import WhatIfList

    class _Ctl(QObject):
        sig_run_finished = Signal(object)

    whatif = WhatIfList(_Ctl())
    whatif.add(HeadEdit(7, 2))
    whatif.add(patch)  # two edits of one head do not stack: the patch replaces the zeroing
    assert whatif.active() == (patch,)
