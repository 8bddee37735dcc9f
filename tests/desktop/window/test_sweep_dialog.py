"""Patching sweep in the window, on the bundled model: opened from the What-if pane's button (and
the Compare menu), run on the model thread with progress, the two maps drawn equal core's
``patching_sweep`` of the same prompts cell by cell, the hover line names the cell, CSV export
equals the grids, and a click on a cell adds exactly that patch (``patch_from`` /
``head_patch_from`` run by hand) to the What-if list. Cancel stops a sweep; a bad input (no
corrupted prompt, prompts of different lengths, a metric token that is two tokens) is one line.
"""

from __future__ import annotations

import csv
import math
from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core.interventions.steer import head_patch_from, patch_from
from llm_lens.core.interventions.sweep import Metric, patching_sweep
from llm_lens.desktop.window.sweep_dialog import SweepDialog
from tests.desktop.conftest import open_window

# the dialog raised offscreen: the plugin cannot raise a window nor size it by its hints
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")
CLEAN = "The Eiffel Tower is in the city of"
CORRUPT = "The Leaning Tower is in the city of"  # nine tokens too


@pytest.fixture
def window(qtbot: Any, tmp_path: Any, monkeypatch: Any) -> Any:
    win = open_window(qtbot, tmp_path, monkeypatch)
    win.prompt_panel.editor.setPlainText(CLEAN)
    win.prompt_panel.chat_box.setChecked(False)
    yield win
    win.close()


def _dialog(win: Any) -> SweepDialog:
    win.panes["What if?"].sweep_button.click()  # the What-if pane's button opens it
    dialog = win.findChild(SweepDialog)
    assert dialog is not None and dialog.isVisible()
    return dialog


def _engine(win: Any) -> Any:
    return win.controller.worker.workbench.engine


def _same_length(engine: Any) -> tuple[list[int], list[int], str]:
    """The clean ids, corrupted ids and corrupted text, cut to one length by words."""
    clean = engine.tokenize(CLEAN, chat=False).ids
    corrupt = engine.tokenize(CORRUPT, chat=False).ids
    assert len(clean) == len(corrupt), "pick prompts of one token count"
    return clean, corrupt, CORRUPT


def test_the_sweep_runs_draws_exports_and_applies(qtbot: Any, window: Any, tmp_path: Any) -> None:
    dialog = _dialog(window)
    assert dialog.clean.text() == CLEAN and not dialog.chat.isChecked()  # from the prompt box
    engine = _engine(window)
    clean, corrupt, corrupt_text = _same_length(engine)
    dialog.corrupt.setText(corrupt_text)
    dialog.target.setText(" Paris")
    dialog.other.setText(" Rome")
    counts: list[tuple[int, int]] = []
    runner = window.controller.sweep
    runner.sig_progress.connect(lambda d, t: counts.append((d, t)))
    with qtbot.waitSignal(runner.sig_finished, timeout=300_000):
        dialog.run_button.click()
        assert dialog.cancel_button.isEnabled() and window.controller.busy
    assert counts and counts[-1][0] == counts[-1][1]  # progress reached its total
    assert not window.controller.busy and dialog.run_button.isEnabled()
    ids = [engine.tokenizer.encode(t, add_special_tokens=False)[0] for t in (" Paris", " Rome")]
    with torch.inference_mode():
        ref = patching_sweep(engine.model, clean, corrupt, Metric(*ids), engine.anatomy)
    maps = dialog.maps
    np.testing.assert_array_equal(maps.grid("residual"), ref.residual)
    np.testing.assert_array_equal(maps.grid("heads"), ref.heads)
    share = (ref.residual - ref.corrupt) / (ref.clean - ref.corrupt)
    np.testing.assert_allclose(maps.images["residual"].image, share)  # the colours drawn
    _hover_and_csv(maps, ref, tmp_path)
    _click_applies(qtbot, window, maps, engine, clean)
    _run_corrupted(qtbot, window, dialog, ids, ref)


def _hover_and_csv(maps: Any, ref: Any, tmp_path: Any) -> None:
    text = maps.cell_text("residual", 3, 2)
    share = (ref.residual[3, 2] - ref.corrupt) / (ref.clean - ref.corrupt)
    assert "layer 3 at position 2 ('iffel→aning')" in text
    assert f"{ref.residual[3, 2]:.3f}" in text and f"restores {share:.0%}" in text
    assert "head 5.1" in maps.cell_text("heads", 5, 1)
    assert maps.cell_text("heads", 99, 0) == ""
    path = tmp_path / "sweep.csv"
    maps.export(path)
    with path.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    layers, positions = ref.residual.shape
    assert len(rows) == ref.residual.size + ref.heads.size
    for row in rows:
        grid = ref.residual if row["map"] == "residual" else ref.heads
        value = grid[int(row["layer"]), int(row["index"])]
        assert (row["metric"] == "") if math.isnan(value) else float(row["metric"]) == value
    for suffix in ("png", "svg"):
        maps.export(tmp_path / f"sweep.{suffix}")
        assert (tmp_path / f"sweep.{suffix}").stat().st_size > 1000


def _click_applies(qtbot: Any, win: Any, maps: Any, engine: Any, clean: list[int]) -> None:
    whatif = win.controller.whatif
    whatif.clear()
    with qtbot.waitSignal(win.controller.sweep.sig_applied, timeout=60_000):
        maps.images["residual"].sig_clicked.emit(4.5, 3.5)  # image row 4 (layer), column 3
    (added,) = whatif.active()
    _same(added, patch_from(engine.model, engine.anatomy, 4, clean, [3]))
    with qtbot.waitSignal(win.controller.sweep.sig_applied, timeout=60_000):
        maps.images["heads"].sig_clicked.emit(7.2, 2.9)  # layer 7, head 2
    expected = head_patch_from(engine.model, engine.anatomy, 7, 2, clean)
    assert len(whatif.active()) == 2
    _same(whatif.active()[-1], expected)


def _run_corrupted(qtbot: Any, win: Any, dialog: Any, ids: list[int], ref: Any) -> None:
    """The button runs the corrupted prompt under the clicked patches; with the residual one
    alone, its first step's metric is that cell of the map."""
    whatif = win.controller.whatif
    whatif.switch(1, False)  # the head patch off: the residual patch at layer 4, position 3
    win.prompt_panel.max_tokens.setValue(1)
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        dialog.try_button.click()
    ctl = win.controller
    assert ctl.prompt.text == CORRUPT and len(ctl.interventions) == 1
    logits = np.asarray(ctl.steps[0].logits, np.float64)
    assert logits[ids[0]] - logits[ids[1]] == pytest.approx(ref.residual[4, 3], abs=1e-3)


def _same(ours: Any, hand: Any) -> None:
    """The same kind of patch at the same place, its values equal to float rounding (the model
    thread runs its matrix products on another thread count than this one)."""
    assert type(ours) is type(hand)
    assert (ours.layer, ours.positions) == (hand.layer, hand.positions)
    assert getattr(ours, "head", None) == getattr(hand, "head", None)
    np.testing.assert_allclose(ours.values, hand.values, rtol=0, atol=1e-5)


def test_cancel_and_bad_inputs_are_one_line(qtbot: Any, window: Any) -> None:
    dialog = _dialog(window)
    runner = window.controller.sweep
    errors: list[str] = []
    runner.sig_error.connect(errors.append)
    dialog.corrupt.setText("")
    dialog.start()
    assert errors[-1].startswith("type a corrupted prompt") and runner.running == -1
    for corrupt, target, wanted in (
        ("The Trump Tower is in the city of", "", "as many tokens"),  # eight tokens
        (CORRUPT, " Parisienne", "is 2 tokens"),
    ):
        dialog.corrupt.setText(corrupt)
        dialog.target.setText(target)
        with qtbot.waitSignal(runner.sig_error, timeout=60_000):
            dialog.start()
        assert wanted in errors[-1] and "\n" not in errors[-1] and "Traceback" not in errors[-1]
        assert dialog.status.text() == errors[-1] and dialog.run_button.isEnabled()
    dialog.target.setText("")
    dialog.chat.setChecked(True)  # the chat template: a longer sweep, cancelled early
    with qtbot.waitSignal(runner.sig_progress, timeout=60_000):
        dialog.start()
    with qtbot.waitSignal(runner.sig_error, timeout=60_000):
        dialog.cancel_button.click()
    assert "cancelled" in errors[-1] and runner.running == -1 and runner.last is None
    assert not window.controller.busy
