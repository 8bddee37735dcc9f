"""Every pane marks an intervened run, on the bundled model: the Layer stack draws the clean
run's residual norms as a faint line, Attention's header names the changed head, the KV cache
says what a forgotten token's bytes are, and Tokens strikes the forgotten chip through. A clean
run again clears every mark."""

from __future__ import annotations

import numpy as np
import pytest

from llm_lens.core.interventions import Forget, HeadEdit
from llm_lens.desktop.panes.kvcache import human_bytes
from tests.desktop.panes.test_whatif import _front, _run
from tests.desktop.panes.test_whatif import window as window  # a fixture

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")
HEAD = HeadEdit(3, 1, "scale", 0.0)


def _empty(data):
    return data is None or len(data) == 0


def _marks(qtbot, win):
    """What each pane shows of the What-if changes, for the shown run's step 0."""
    ctl = win.controller
    ctl.request_select(0)
    layers = _front(qtbot, win, "Layer stack")
    layers.render(ctl.steps[0])
    attention = _front(qtbot, win, "Attention")
    attention.layer_box.setValue(3)
    attention.head_box.setValue(1)
    attention.render(ctl.steps[0])
    kv = _front(qtbot, win, "KV cache")
    tokens = _front(qtbot, win, "Tokens")
    return {
        "clean_norms": layers.clean_curve.getData()[1],
        "norms": layers.resid_curve.getData()[1],
        "resid_title": layers.resid_plot.titleLabel.text,
        "attention": attention.header.text(),
        "kv": kv.formula_text(ctl.steps[0]),
        "struck": tokens.forgotten.positions,
    }


def test_every_pane_marks_the_intervened_run(qtbot, window):
    win, ctl = window, window.controller
    _run(qtbot, win, win.prompt_panel.run)
    clean_norms = np.array(ctl.steps[0].residual_norms)
    plain = _marks(qtbot, win)
    assert _empty(plain["clean_norms"])
    assert "intervened" not in plain["attention"] and "forgotten" not in plain["kv"]
    assert plain["struck"] == ()

    ctl.whatif.add(HEAD)
    ctl.whatif.add(Forget(2))
    _run(qtbot, win, ctl.whatif.request_run)
    assert ctl.interventions == (HEAD, Forget(2))
    marked = _marks(qtbot, win)
    np.testing.assert_allclose(marked["clean_norms"], clean_norms, rtol=1e-6)
    assert np.abs(marked["norms"] - clean_norms).max() > 1e-3  # the head changed the stream
    assert "faint: the clean run" in marked["resid_title"]
    assert marked["attention"].startswith("intervened: head 3.1 = 0 · layer 3, head 1")
    kv = ctl.steps[0].kv
    per = kv.bytes_total // kv.tokens
    assert (
        f"forgotten token 2: {human_bytes(per)} ({per:,} bytes a token) of it still held"
        in (marked["kv"])
    )
    assert per * kv.tokens == kv.bytes_total
    assert marked["struck"] == (2,)
    attention = win.panes["Attention"]
    attention.head_box.setValue(0)  # another head of the layer: unchanged
    attention.render(ctl.steps[0])
    assert "intervened" not in attention.header.text()

    ctl.whatif.clear()
    _run(qtbot, win, ctl.whatif.request_run)
    again = _marks(qtbot, win)
    assert _empty(again["clean_norms"]) and again["struck"] == ()
    assert "intervened" not in again["attention"] and "forgotten" not in again["kv"]
