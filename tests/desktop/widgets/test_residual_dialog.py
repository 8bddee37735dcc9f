"""A residual cell's right-click in the Layer stack, on the bundled model: "patch from another
prompt…" adds the patch whose rows are transformers' own hidden states of that prompt entering
the layer; "add the steering vector…" adds the .npy vector times the strength; bad input stays
in the dialog as one line and adds nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_lens.core.interventions import ResidualAdd, ResidualPatch
from llm_lens.desktop.widgets.residual_dialog import ADD_LABEL, PATCH_LABEL, ResidualDialog
from tests.desktop.conftest import wait_result
from tests.desktop.panes.test_whatif import _front, _plot_point, _right_click, _run
from tests.desktop.panes.test_whatif import window as window  # a fixture

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")
OTHER = "The capital of Italy is"


def _open(qtbot, win, layers, pick, position, row):
    viewport = layers.heat_plot.scene().views()[0].viewport()
    point = _plot_point(layers.heat_plot, position + 0.5, row + 0.5)
    _right_click(qtbot, win, viewport, point, pick)
    dialog = layers.findChildren(ResidualDialog)[-1]
    assert dialog.isVisible() and dialog.layer == row
    return dialog


def test_a_residual_cell_patches_from_another_prompt_or_adds_a_vector(
    qtbot, window, engine, tmp_path
):
    win, ctl = window, window.controller
    _run(qtbot, win, win.prompt_panel.run)
    ctl.request_select(0)
    wait_result(qtbot, ctl, "prompt_lens")
    layers = _front(qtbot, win, "Layer stack")
    layers.tabs.setCurrentIndex(1)
    layers.render_and_paint()
    assert [getattr(c, "label", None) for c in layers.residual_changes(1.5, 4.5)][-2:] == [
        PATCH_LABEL, ADD_LABEL,
    ]  # fmt: skip
    rows = layers._prompt_lens.top1_ids.shape[0]
    assert layers.residual_changes(1.5, rows - 0.5) == []  # the final stream enters no layer

    dialog = _open(qtbot, win, layers, PATCH_LABEL, 2, 4)
    dialog.accept()  # no prompt typed: one line, still open, nothing added
    assert dialog.isVisible() and "type the prompt" in dialog.error.text()
    dialog.prompt.setText(OTHER)
    dialog.positions.setText("1-2")
    with qtbot.waitSignal(ctl.whatif.sig_changed, timeout=60_000):
        dialog.accept()
    patch = ctl.whatif.active()[-1]
    assert isinstance(patch, ResidualPatch) and (patch.layer, patch.positions) == (4, (1, 2))
    ids = engine.tokenize(OTHER, chat=False).ids
    with torch.inference_mode():
        hidden = engine.model(input_ids=torch.tensor([list(ids)]), output_hidden_states=True)
    ref = hidden.hidden_states[4][0, 1:3].double().numpy()
    np.testing.assert_allclose(np.array(patch.values), ref, rtol=1e-4, atol=1e-5)

    width = engine.model.config.hidden_size
    good, bad = tmp_path / "v.npy", tmp_path / "short.npy"
    np.save(good, np.linspace(-1, 1, width))
    np.save(bad, np.ones(3))
    dialog = _open(qtbot, win, layers, ADD_LABEL, 3, 6)
    dialog.path.setText(str(bad))
    dialog.accept()
    assert dialog.isVisible() and f"the stream has {width}" in dialog.error.text()
    dialog.path.setText(str(good))
    dialog.strength.setValue(2.5)
    dialog.positions.setText("x")
    dialog.accept()
    assert dialog.isVisible() and "positions" in dialog.error.text()
    dialog.positions.setText("3")
    dialog.accept()
    assert not dialog.isVisible()
    added = ctl.whatif.active()[-1]
    assert isinstance(added, ResidualAdd) and (added.layer, added.positions) == (6, (3,))
    np.testing.assert_allclose(added.vector, 2.5 * np.linspace(-1, 1, width))
