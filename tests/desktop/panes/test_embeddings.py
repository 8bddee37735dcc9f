"""desktop.panes.embeddings: the vocabulary overlay, neighbours and layer paths against the real
model's analyses."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from llm_lens.core import embeddings
from tests.desktop.conftest import wait_result
from tests.desktop.panes.helpers import check_exports, render_step


@pytest.mark.slow
def test_embeddings_vocabulary_overlay_and_neighbours(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.embeddings import EmbeddingsPane

    pane = EmbeddingsPane(ran)
    qtbot.addWidget(pane)
    calls = []
    original = pane.vocab.setData
    pane.vocab.setData = lambda *a, **k: (calls.append(1), original(*a, **k))
    proj = wait_result(qtbot, ran, "embedding_projection")
    for index in range(len(ran.steps)):
        render_step(pane, ran, index)
    assert len(calls) == 1 and pane.vocab_set_count == 1
    assert len(pane.vocab.data) == ran.info.vocab_size
    ids = list(dict.fromkeys(ran.prompt.ids))
    np.testing.assert_array_equal(np.column_stack(pane.prompt_dots.getData()), proj.coords[ids])
    response = list(dict.fromkeys(s.token.id for s in ran.steps))
    np.testing.assert_array_equal(
        np.column_stack(pane.response_dots.getData()), proj.coords[response]
    )
    render_step(pane, ran, 1)  # earlier step: fewer response tokens, still no vocabulary setData
    assert len(pane.response_ids) <= 2 and len(calls) == 1

    token = ran.steps[0].token.id
    assert pane.nearest(*proj.coords[token]) == token  # highlighted tokens win ties
    pane.resize(700, 450)
    pane.show()
    qtbot.waitExposed(pane)
    vb = pane.vocab_plot.getViewBox()
    scene_pos = vb.mapViewToScene(QPointF(*map(float, proj.coords[token])))
    widget_pos = pane.vocab_widget.mapFromScene(scene_pos)
    qtbot.mouseClick(pane.vocab_widget.viewport(), Qt.MouseButton.LeftButton, pos=widget_pos)
    assert f"Nearest to {token}" in pane.neighbour_title.text()  # the click asked for it
    qtbot.waitUntil(lambda: pane.neighbour_list.count() == 10, timeout=60_000)
    expected = embeddings.neighbours(ran.worker.workbench.engine, token)
    got = [pane.neighbour_list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(10)]
    assert got == expected.ids.tolist()
    sims = [pane.neighbour_list.item(i).data(Qt.ItemDataRole.UserRole + 1) for i in range(10)]
    np.testing.assert_allclose(sims, expected.similarities, rtol=1e-5)
    rows = check_exports(
        pane,
        tmp_path,
        len(dict.fromkeys(pane.prompt_ids + pane.response_ids)),
        header=("token id", "text", "x", "y"),
    )
    assert int(rows[0][0]) == ran.prompt.ids[0]
    assert float(rows[0][2]) == pytest.approx(float(proj.coords[ran.prompt.ids[0], 0]))


@pytest.mark.slow
def test_embeddings_layer_paths(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.embeddings import EmbeddingsPane

    pane = EmbeddingsPane(ran)
    qtbot.addWidget(pane)
    pane.mode.setCurrentIndex(1)
    paths = wait_result(qtbot, ran, "hidden_paths")
    pane.render(ran.current_step())
    n, layers = len(ran.prompt), ran.info.num_layers
    assert paths.coords.shape == (n, layers + 1, 2)
    assert len(pane.segments) == layers
    x, y = pane.segments[3].getData()
    np.testing.assert_array_equal(x[0::2], paths.coords[:, 3, 0])
    np.testing.assert_array_equal(y[1::2], paths.coords[:, 4, 1])
    np.testing.assert_array_equal(np.column_stack(pane.end_dots.getData()), paths.coords[:, -1])
    assert "PC1" in pane.explained.text()
    check_exports(pane, tmp_path, n * (layers + 1), header=("position", "token", "layer", "x", "y"))


@pytest.mark.slow
def test_embeddings_layer_paths_hide_the_neighbour_list(qtbot, ran):
    from llm_lens.desktop.panes.embeddings import EmbeddingsPane
    from tests.desktop.conftest import wait_result

    pane = EmbeddingsPane(ran)
    qtbot.addWidget(pane)
    pane.show()
    token = ran.prompt.ids[-1]
    wait_result(qtbot, ran, "neighbours", token_id=token)
    pane.select_token(token)
    assert pane.neighbour_list.count() > 0 and pane.neighbour_box.isVisible()
    pane.mode.setCurrentIndex(1)
    assert not pane.neighbour_box.isVisible() and not pane.neighbour_list.isVisible()
    pane.mode.setCurrentIndex(0)
    assert pane.neighbour_box.isVisible()
