"""desktop.teaching.hover: the readout line under a pane shows what its plots say under the
mouse, from the pane's own hover targets; in the real window, the record's numbers."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QLabel, QVBoxLayout

from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.teaching.hover import install_hover
from llm_lens.desktop.widgets.pane import HoverTarget, Pane
from tests.desktop.teaching.conftest import settle


class _Plotting(Pane):
    title = "Plotting"

    def __init__(self, controller: Controller) -> None:
        super().__init__(controller)
        self.widget = pg.PlotWidget()
        self.plot = self.widget.getPlotItem()
        self.plot.setRange(xRange=(0, 10), yRange=(0, 10), padding=0)
        QVBoxLayout(self).addWidget(self.widget)

    def render(self, step):
        pass

    def clear(self):
        pass

    def text_at(self, x: float, y: float) -> str:
        return f"cell {int(x)},{int(y)}" if 0 <= x < 5 else ""

    def hover_targets(self) -> list[HoverTarget]:
        return [HoverTarget(self.plot, self.text_at)]


@pytest.fixture
def ctl(qtbot):
    controller = Controller()
    yield controller
    controller.shutdown()


def _move(pane: _Plotting, x: float, y: float) -> None:
    scene_pos = pane.plot.getViewBox().mapViewToScene(QPointF(x, y))
    pane.plot.scene().sigMouseMoved.emit(scene_pos)


def test_the_readout_shows_the_panes_text_under_the_mouse(qtbot, ctl):
    pane = _Plotting(ctl)
    qtbot.addWidget(pane)
    pane.resize(400, 300)
    pane.show()
    qtbot.waitExposed(pane)
    install_hover({"Plotting": pane}, ctl)
    label = pane.readout
    assert isinstance(label, QLabel) and pane.layout().indexOf(label) >= 0
    _move(pane, 2.5, 7.5)
    assert label.text() == "cell 2,7"
    _move(pane, 8.5, 7.5)  # outside the data: the last line stays
    assert label.text() == "cell 2,7"


def test_a_pane_without_targets_gets_no_readout(qtbot, ctl):
    class Quiet(_Plotting):
        hover_targets = Pane.hover_targets

    pane = Quiet(ctl)
    qtbot.addWidget(pane)
    install_hover({"Quiet": pane}, ctl)
    assert pane.readout is None
    assert pane.findChildren(QLabel) == []


def test_hover_readouts_and_cards_carry_the_records_numbers(qtbot, shown):
    win, ctl = shown, shown.controller
    panes = win.panes
    att = panes["Attention"]
    text = att.cell_text(1.5, 4.5)
    assert f"weight {float(att.matrix[4, 1]):.4f}" in text
    assert repr(ctl.prompt.tokens[1].text) in text and "layer 0, head 0" in text
    assert "future token" in att.cell_text(4.5, 1.5)
    step = ctl.current_step()
    bar = panes["Logits"].bar_text(0.1)
    assert f"logit {float(step.top_logits[0]):.3f}" in bar and f"id {int(step.top_ids[0])}" in bar
    emb = panes["Embeddings"]
    tid = ctl.prompt.tokens[2].id
    x, y = emb.projection.coords[tid]
    point = emb.point_text(float(x), float(y))
    norm = float(np.linalg.norm(ctl.prefill.hidden[0, 2]))
    assert f"PC1 {float(x):.3f}" in point and f"‖e‖ {norm:.3f}" in point

    ctl.request_select_token(4)
    settle(qtbot, win, 50)
    cards = win.cards
    z = float(step.logits[step.token.id])
    assert f"had logit {z:.1f}" in cards["Logits"].explainer.headline
    assert f"{step.kv.formula_bytes:,} bytes" in cards["KV cache"].explainer.headline
    norms = step.residual_norms
    assert f"{norms[-1]:.2f}" in cards["Layer stack"].explainer.headline
    k = int(np.argmax(att.matrix[4, :5]))
    assert f"{float(att.matrix[4, k]):.3f}" in cards["Attention"].explainer.headline
    assert f"id {ctl.prompt.tokens[4].id}" in cards["Tokens"].explainer.headline
    assert "the token the run chose" in cards["Sampling"].explainer.headline
    for title, card in cards.items():
        assert card.explainer is not None, title
        assert card.explainer.shows and card.explainer.try_this, title

    # the Sampling card follows the sliders: greedy draws the argmax at any step
    panes["Sampling"].controls.greedy.setChecked(True)
    assert panes["Sampling"].draw.token_id == int(np.argmax(step.logits))
