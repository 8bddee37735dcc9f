"""desktop.teaching.linking: every pane that marks tokens follows the one selected token.

Fake panes record the hook calls; the controller has no model (the selection signal alone)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.teaching.linking import link_panes
from llm_lens.desktop.widgets.pane import Pane


class _Marking(Pane):
    title = "Marking"

    def __init__(self, controller: Controller) -> None:
        super().__init__(controller)
        self.installed = 0
        self.marked: list[int] = []

    def render(self, step):
        pass

    def clear(self):
        pass

    def install_marks(self) -> bool:
        self.installed += 1
        return True

    def mark_token(self, position: int) -> None:
        self.marked.append(position)
        self.linked = {"position": position}


class _Plain(_Marking):
    title = "Plain"

    def install_marks(self) -> bool:
        self.installed += 1
        return False


@pytest.fixture
def ctl(qtbot):
    controller = Controller()
    yield controller
    controller.shutdown()


def test_a_marking_pane_follows_the_selection_and_its_own_renders(qtbot, ctl):
    marking, plain = _Marking(ctl), _Plain(ctl)
    for pane in (marking, plain):
        qtbot.addWidget(pane)
    plain.linked = {"stale": True}
    link_panes({"Marking": marking, "Plain": plain}, ctl)
    assert marking.installed == plain.installed == 1  # asked once each
    assert plain.linked == {}  # a fresh start for every pane

    ctl.show_state(replace(ctl.shown, token=3))
    ctl.sig_token_selected.emit(3)
    assert marking.marked == [3] and marking.linked == {"position": 3}
    ctl.show_state(replace(ctl.shown, token=-1))
    marking.render_and_paint()  # after its own render it marks the selection again
    assert marking.marked == [3, -1]
    assert plain.marked == []  # a pane that shows no single token is never asked


def test_a_pane_marks_nothing_by_default(qtbot, ctl):
    class Bare(_Marking):
        install_marks = Pane.install_marks
        mark_token = Pane.mark_token

    pane = Bare(ctl)
    qtbot.addWidget(pane)
    link_panes({"Bare": pane}, ctl)
    ctl.sig_token_selected.emit(2)
    assert pane.linked == {} and pane.after_render == []
