"""What-if pane in the window, on the bundled model: a right-click on a head (Attention's grid)
and on a token chip (Tokens) adds interventions; "Run with these" runs under them, the pane lists
them, every run is marked, and the tokens equal ``llm-lens trace --intervene`` with the same
SPECs; switched off, the run is the clean one again. The Logits pane shows the clean bars."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from llm_lens.core.cli import main
from llm_lens.core.interventions import BlockEdit, ExpertEdit, Forget, HeadEdit, to_spec
from llm_lens.core.sampling import GREEDY
from llm_lens.desktop.state.whatif import describe, mark_text
from tests.desktop.conftest import open_window, wait_result
from tests.desktop.panes.test_experts import mixtral_folder as mixtral_folder  # a fixture

# a menu popped up offscreen: the plugin cannot raise it nor grab the keyboard
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")
PROMPT = "The capital of France is"
TOKENS = 5


@pytest.fixture
def window(qtbot: Any, tmp_path: Any, monkeypatch: Any) -> Any:
    win = open_window(qtbot, tmp_path, monkeypatch)
    win.controller.request_params(GREEDY)
    panel = win.prompt_panel
    panel.editor.setPlainText(PROMPT)
    panel.chat_box.setChecked(False)
    panel.max_tokens.setValue(TOKENS)
    yield win
    win.close()


def _run(qtbot: Any, win: Any, how: Any) -> list[int]:
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        how()
    qtbot.wait(50)
    return [s.token.id for s in win.controller.steps]


def _front(qtbot: Any, win: Any, title: str) -> Any:
    win.docks[title].show()
    win.docks[title].raise_()
    qtbot.wait(50)
    QApplication.processEvents()
    pane = win.panes[title]
    pane.render_and_paint()
    return pane


def _right_click(qtbot: Any, win: Any, widget: Any, pos: QPoint, pick: str) -> None:
    """A real right-click at ``pos`` of ``widget``; the menu's action ``pick`` is chosen."""
    win.whatif_menus.menu = None
    QTest.mousePress(widget, Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier, pos)
    QTest.mouseRelease(widget, Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier, pos)
    menu = win.whatif_menus.menu
    assert menu is not None, "no What-if menu at that place"
    action = next(a for a in menu.actions() if a.text() == pick)
    menu.close()
    action.trigger()


def _grid_point(pane: Any, layer: int, head: int) -> QPoint:
    """Where head (layer, head) of the Attention pane's grid is on its view's viewport."""
    from llm_lens.desktop.panes.attention.cells import TILE

    box = pane.grid_plot.getViewBox()
    scene = box.mapViewToScene(QPointF((head + 0.5) * TILE, (layer + 0.5) * TILE))
    return pane.graphics.mapFromScene(scene)


def _trace_tokens(tmp_path: Any, specs: list[str], n: int = TOKENS) -> list[int]:
    out = tmp_path / "trace.json"
    args = [a for s in specs for a in ("--intervene", s)]
    code = main(["trace", PROMPT, "--raw", "--greedy", "--max-new-tokens", str(n), *args,
                 "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 0
    return [s["token_id"] for s in json.loads(out.read_text(encoding="utf-8"))["steps"]]


def test_context_actions_run_listed_marked_and_equal_to_trace(qtbot, window, tmp_path):
    win, ctl = window, window.controller
    pane = win.panes["What if?"]
    clean = _run(qtbot, win, win.prompt_panel.run)
    clean_logits = np.array(ctl.steps[0].logits)
    assert pane.rows() == [] and "clean" in pane.shown_label.text()

    attention = _front(qtbot, win, "Attention")
    head = HeadEdit(3, 1, "scale", 0.0)
    _right_click(qtbot, win, attention.graphics.viewport(), _grid_point(attention, 3, 1),
                 describe(head))  # fmt: skip
    tokens = _front(qtbot, win, "Tokens")
    chip = tokens.model_view.rects[2].center().toPoint()  # the third prompt token
    _right_click(qtbot, win, tokens.model_view, chip, describe(Forget(2)))
    assert ctl.whatif.active() == (head, Forget(2))

    _front(qtbot, win, "What if?")
    assert pane.rows() == [(describe(head), True), (describe(Forget(2)), True)]
    changed = _run(qtbot, win, pane.run_button.click)
    assert ctl.interventions == (head, Forget(2))
    assert win.whatif_menus.mark.isVisible()
    assert win.whatif_menus.mark.text() == mark_text((head, Forget(2)))
    assert "intervened" in pane.shown_label.text()
    assert changed == _trace_tokens(tmp_path, [to_spec(head), "forget:2"])
    assert np.abs(np.array(ctl.steps[0].logits) - clean_logits).max() > 1e-3

    logits = _front(qtbot, win, "Logits")
    ctl.request_select(0)
    logits.render(ctl.steps[0])  # the clean run's bars beside the intervened ones
    assert logits.clean_ends is not None
    ids = np.asarray(ctl.steps[0].top_ids[: len(logits.clean_ends)])
    p = np.exp(clean_logits - np.logaddexp.reduce(clean_logits.astype(np.float64)))
    np.testing.assert_allclose(logits.clean_ends, p[ids], rtol=1e-5)
    assert pane.difference(ctl.steps[0]).startswith("step 0: chose")

    pane.table.item(0, 0).setCheckState(Qt.CheckState.Unchecked)  # the switches, as clicked
    pane.table.item(1, 0).setCheckState(Qt.CheckState.Unchecked)
    assert ctl.whatif.active() == () and len(ctl.whatif.entries) == 2
    again = _run(qtbot, win, pane.run_button.click)
    assert again == clean and ctl.interventions == ()
    np.testing.assert_allclose(ctl.steps[0].logits, clean_logits, atol=1e-5)
    assert not win.whatif_menus.mark.isVisible()


def test_a_continuation_keeps_the_interventions_and_remove_and_specs(qtbot, window, tmp_path):
    win, ctl = window, window.controller
    pane = win.panes["What if?"]
    pane.spec_edit.setText("head:2.0*0.5")
    pane.add_spec()
    pane.spec_edit.setText("head:99.0=0")  # parsed; checked against the model when it runs
    pane.add_spec()
    pane.spec_edit.setText("nonsense")
    pane.add_spec()
    assert "not a SPEC" in pane.error_label.text()
    assert [r[0] for r in pane.rows()] == ["head 2.0 × 0.5", "head 99.0 = 0"]
    pane.table.cellWidget(1, 1).click()  # its remove button
    assert [r[0] for r in pane.rows()] == ["head 2.0 × 0.5"]
    _run(qtbot, win, pane.run_button.click)
    head = HeadEdit(2, 0, "scale", 0.5)
    assert ctl.interventions == (head,)
    pane.table.item(0, 0).setCheckState(Qt.CheckState.Unchecked)  # the list no longer holds it
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        win.prompt_panel.continue_run()
    qtbot.waitUntil(lambda: not ctl.busy, timeout=60_000)
    assert len(ctl.steps) == 2 * TOKENS
    tokens = [s.token.id for s in ctl.steps]
    assert tokens == _trace_tokens(tmp_path, ["head:2.0*0.5"], 2 * TOKENS)
    assert ctl.interventions == (head,)  # the continuation is made under its run's changes
    assert win.whatif_menus.mark.text() == mark_text((head,))


def _plot_point(plot: Any, x: float, y: float) -> QPoint:
    """Where view point (x, y) of ``plot`` is on its view's viewport."""
    scene = plot.getViewBox().mapViewToScene(QPointF(x, y))
    return plot.scene().views()[0].mapFromScene(scene)


def test_a_layer_and_a_head_of_why_this_token_offer_changes(qtbot, window):
    win, ctl = window, window.controller
    _run(qtbot, win, win.prompt_panel.run)
    ctl.request_select(0)  # the heatmap is the prefill's: the prompt lens
    wait_result(qtbot, ctl, "prompt_lens")
    layers = _front(qtbot, win, "Layer stack")
    layers.tabs.setCurrentIndex(1)
    layers.render_and_paint()
    assert layers._prompt_lens is not None
    viewport = layers.heat_plot.scene().views()[0].viewport()
    # row 3 of the heatmap is the stream after block 2: its MLP is offered
    _right_click(qtbot, win, viewport, _plot_point(layers.heat_plot, 1.5, 3.5), "MLP 2 = 0")
    why = _front(qtbot, win, "Why this token?")
    why.explain_step(len(ctl.steps) - 1)
    qtbot.waitUntil(lambda: why.result is not None, timeout=60_000)
    viewport = why.heads_plot.scene().views()[0].viewport()
    _right_click(qtbot, win, viewport, _plot_point(why.heads_plot, 4.5, 7.5), "head 7.4 × 0.5")
    assert ctl.whatif.active() == (BlockEdit(2, "mlp", 0.0), HeadEdit(7, 4, "scale", 0.5))
    assert win.panes["What if?"].rows()[0] == ("MLP 2 = 0", True)


def test_an_expert_offers_forbid_and_force(qtbot, tmp_path, monkeypatch, request):
    folder = request.getfixturevalue("mixtral_folder")
    win = open_window(qtbot, tmp_path, monkeypatch, str(folder))
    try:
        ctl = win.controller
        with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
            ctl.request_run(PROMPT, False, GREEDY, 3)
        experts = _front(qtbot, win, "Experts")
        layer = int(experts.routing.layers[1])
        clean = np.asarray(ctl.steps[0].routing.experts[1]).ravel()  # the prompt's, that layer
        expert = int(np.bincount(clean).argmax())  # the one it routed to most
        viewport = experts.layer_plot.scene().views()[0].viewport()
        point = _plot_point(experts.layer_plot, expert + 0.5, 1.5)  # the second MoE layer
        _right_click(qtbot, win, viewport, point, f"expert {layer}.{expert} off")
        assert ctl.whatif.active() == (ExpertEdit(layer, (expert,), "off"),)
        with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
            ctl.request_run(PROMPT, False, GREEDY, 3)
        assert ctl.interventions == (ExpertEdit(layer, (expert,), "off"),)
        routing = ctl.steps[0].routing  # the router never picks the forbidden expert there
        row = list(np.asarray(routing.layers)).index(layer)
        assert expert not in np.asarray(routing.experts[row]).ravel()
    finally:
        win.close()
