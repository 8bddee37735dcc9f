"""The Compare view on the real model: side-by-side columns against separate runs, K samples,
prefix reuse, bad settings, and rows that wrap on a laptop."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from tests.desktop.views.conftest import PROMPT


def _finish_compare(qtbot, win, view):
    with qtbot.waitSignal(win.controller.compare.sig_compare_finished, timeout=120_000) as b:
        view.run_button.click()
    qtbot.waitUntil(lambda: all(c.show_button.isEnabled() for c in view.columns), timeout=5000)
    return b.args[0]


def _chip_centre(column, index):
    return column.chips.rects[index].center().toPoint()


def test_three_columns_equal_separate_runs_and_follow_selection(qtbot, window, engine):
    from llm_lens.core.runs.compare import compare

    view = window.open_compare()
    presets = [("factual", 1), ("creative", 2), ("wild", 3)]
    for row, (preset, seed) in zip(view.rows, presets, strict=True):
        row.set_preset(preset)
        row.boxes["seed"].setValue(seed)
    view.max_tokens.setValue(5)
    outcome = _finish_compare(qtbot, window, view)

    configs = [row.params() for row in view.rows]
    prompt = engine.tokenize(PROMPT)
    columns = window.controller.compare.columns
    for params, records in zip(configs, columns, strict=True):
        separate = engine.start(prompt, params, RunConfig(max_new_tokens=5)).run_all()
        assert [s.token.id for s in records] == [s.token.id for s in separate]
    reference = compare(engine, prompt, configs, RunConfig(max_new_tokens=5))
    assert outcome.divergence_step == reference.divergence_step
    expected_marker = -1 if reference.divergence_step is None else reference.divergence_step
    assert [c.chips.diverge for c in view.columns] == [expected_marker] * 3
    assert len(outcome.kl_per_step) == len(reference.kl_per_step)
    assert view.curves[0].getData()[1].tolist() == pytest.approx(reference.kl_per_step)
    assert "shared prefill:" in view.info.text() and "saved" in view.info.text()
    assert "perplexity" in view.columns[0].stats.text()

    qtbot.mouseClick(view.columns[0].chips, Qt.MouseButton.LeftButton, pos=_chip_centre(
        view.columns[0], 2))  # fmt: skip
    assert view.selected == 2
    assert [c.chips.selected for c in view.columns] == [2, 2, 2]

    ctl = window.controller
    view.columns[1].show_button.click()
    assert ctl.steps == tuple(columns[1]) and ctl.selected == 2
    assert ctl.run_id == ctl.compare.start.run_ids[1] and ctl.recorded is None
    from tests.desktop.conftest import wait_result

    lens = wait_result(qtbot, ctl, "lens", step=2, k=5)  # the column answers analyses
    assert lens is not None


def test_same_seed_many_samples_rows(qtbot, window, engine):
    from llm_lens.core.runs.compare import samples

    view = window.open_compare()
    view.mode.setCurrentIndex(1)
    view.rows[0].set_preset("creative")
    view.rows[0].boxes["seed"].setValue(5)
    view.k_box.setValue(3)
    view.max_tokens.setValue(4)
    _finish_compare(qtbot, window, view)

    params = view.rows[0].params()
    reference = samples(engine, engine.tokenize(PROMPT), params, 3, 5, RunConfig(max_new_tokens=4))
    got = [[s.token.id for s in col] for col in window.controller.compare.columns]
    assert got == [r.generated_ids for r in reference.runs]
    assert [c.header.text() for c in view.columns] == ["seed 5", "seed 6", "seed 7"]
    positions = [view.grid.getItemPosition(view.grid.indexOf(c))[:2] for c in view.columns]
    assert positions == [(0, 0), (1, 0), (2, 0)]  # K rows of chips


def test_bad_settings_are_inline_messages(qtbot, window):
    view = window.open_compare()
    compare = window.controller.compare
    view.rows[0].boxes["temperature"].setValue(-0.5)
    view.run()
    assert view.error.isVisible() and "temperature must be ≥ 0" in view.error.text()
    assert "#1" in view.error.text() and not compare.running
    view.rows[0].set_preset("factual")
    view.rows[1].boxes["top_p"].setValue(1.5)
    view.run()
    assert "top-p must be in (0, 1]" in view.error.text() and "#2" in view.error.text()
    view.rows[1].set_preset("creative")
    assert not view.error.isVisible()
    view.add_row()
    assert view.add_row() is None and len(view.rows) == 4
    assert "at most 4" in view.error.text() and view.error.isVisible()
    with qtbot.waitSignal(compare.sig_error):
        compare.request_compare(PROMPT, True, [GREEDY] * 5, 3)
    assert "got 5" in view.error.text()
    view.mode.setCurrentIndex(1)
    for k in (1, 17):
        view.k_box.setValue(k)
        view.run()
        assert f"between 2 and 16; got {k}" in view.error.text()
    assert not compare.running and not window.controller.busy


def test_prefix_reuse_reports_in_the_status_bar(qtbot, window, engine):
    ctl = window.controller
    branch_view = window.open_branch()
    branch_view.reuse.setChecked(True)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run(PROMPT, True, GREEDY, 3)
    assert window.reuse_label.text().startswith("reused 0 tokens")
    edited = PROMPT + ", please"
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run(edited, True, GREEDY, 3)
    reused = int(window.reuse_label.text().split()[1])
    assert window.reuse_label.isVisible() and 0 < reused < len(ctl.prompt)
    assert "TTFT saved" in window.reuse_label.text()
    assert ctl.prefill.hidden.shape[1] == len(ctl.prompt)  # joined: the whole prompt
    full = engine.start(engine.tokenize(edited), GREEDY, RunConfig(max_new_tokens=3)).run_all()
    assert [s.token.id for s in ctl.steps] == [s.token.id for s in full]
    np.testing.assert_allclose(ctl.steps[0].logits, full[0].logits, atol=2e-3)


@pytest.mark.parametrize("size", [(1366, 768), (1280, 720)])
def test_configuration_rows_wrap_on_a_laptop_without_clipping(qtbot, window, size):
    from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QComboBox, QToolButton, QWidget

    from llm_lens.desktop.startup.fit_check import control_problems, in_window

    view = window.open_compare()
    view.add_row("wild")  # four rows: taller than the dock at 720 px, so it scrolls
    window.resize_to(*size)
    dock = window.view_docks["Compare"]
    dock.raise_()
    qtbot.wait(100)
    QApplication.processEvents()
    assert (window.width(), window.height()) == size
    assert control_problems(window, dock, "Compare") == []
    one_line = view.rows[0].sizeHint().width()  # all of a row's controls side by side (~870 px)
    assert dock.width() < one_line  # the dock no longer needs one line's width
    for row in view.rows:
        kinds = (QAbstractSpinBox, QComboBox, QToolButton)
        controls = [w for w in row.findChildren(QWidget) if isinstance(w, kinds) and w.isVisible()]
        rects = [in_window(row, w) for w in controls]
        assert len(controls) == 8  # the preset, six settings, remove
        assert all(row.rect().contains(r) for r in rects)  # none cut off by the row
        assert not any(a.intersects(b) for i, a in enumerate(rects) for b in rects[i + 1 :])
        assert len({r.top() for r in rects}) >= 2  # wrapped onto a second line
        assert row.height() >= row.layout().heightForWidth(row.width())
