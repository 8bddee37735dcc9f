"""desktop.teaching.linking: every pane that marks tokens follows the one selected token.

Fake panes record the hook calls; the controller has no model (the selection signal alone).
In the real window, asserted on data each pane keeps for its marks (``pane.linked``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from PySide6.QtCore import QPoint, Qt

from llm_lens.core.positions import position_view
from llm_lens.desktop.panes.attention import overview_cell
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.teaching.linking import link_panes
from llm_lens.desktop.widgets.pane import Pane
from tests.desktop.teaching.conftest import settle


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


def test_selecting_a_token_in_one_pane_highlights_it_in_every_other(qtbot, shown):
    win, ctl = shown, shown.controller
    panes, n = shown.panes, len(shown.controller.prompt)
    pos = 3
    ctl.request_select_token(pos)
    settle(qtbot, win, 50)
    amap = ctl.request_analysis("attention_map", layer=0, head=0, max_size=256)
    assert panes["Tokens"].linked["chip"] == pos
    att = panes["Attention"].linked
    assert att["cell"] == pos
    np.testing.assert_array_equal(att["row_weights"], amap.weights[pos, : pos + 1])
    np.testing.assert_array_equal(att["column_weights"], amap.weights[pos:, pos])
    assert att["grid_cell"] == overview_cell(n, pos) and att["grid_row"]
    lens = ctl.request_analysis("prompt_lens")
    assert panes["Layer stack"].linked["lens_column"] == pos
    assert panes["Layer stack"].linked["lens_top1"] == tuple(r[pos] for r in lens.top1_texts)
    proj = ctl.request_analysis("embedding_projection")
    token_id = ctl.prompt.tokens[pos].id
    np.testing.assert_allclose(panes["Embeddings"].linked["point"], proj.coords[token_id])
    paths = ctl.request_analysis("hidden_paths")
    np.testing.assert_allclose(panes["Embeddings"].linked["path"], paths.coords[pos])
    angles = position_view(ctl.worker.workbench.engine.model, n).rope[0].angles[pos]
    np.testing.assert_allclose(panes["Positions"].linked["angle_row"], angles)
    lines = panes["Attention lines"]
    assert lines.view.selected == pos and set(lines.shown[0].tolist()) == {pos}

    # a click on another chip in the Tokens pane moves every highlight
    view = panes["Tokens"].model_view
    win.docks["Tokens"].raise_()
    centre = view.rects[pos + 2].center()
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(int(centre.x()), int(centre.y())))
    settle(qtbot, win, 50)
    assert ctl.token == pos + 2
    assert panes["Attention"].linked["cell"] == pos + 2
    assert panes["Layer stack"].linked["lens_column"] == pos + 2

    # a generated token selects the step that chose it
    centre = view.rects[n + 2].center()
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(int(centre.x()), int(centre.y())))
    settle(qtbot, win, 50)
    assert ctl.token == n + 2 and ctl.selected == 2
    assert panes["Tokens"].linked["chip"] == n + 2
