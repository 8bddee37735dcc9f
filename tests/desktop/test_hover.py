"""desktop.teaching.hover: the readout line under a pane shows what its plots say under the
mouse, from the pane's own hover targets."""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QLabel, QVBoxLayout

from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.teaching.hover import install_hover
from llm_lens.desktop.widgets.pane import HoverTarget, Pane


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
