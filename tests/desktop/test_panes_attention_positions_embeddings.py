"""Attention, Positions and Embeddings panes against the real model's records."""

from __future__ import annotations

import csv
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QImage

from llm_lens.core import embeddings
from tests.desktop.conftest import wait_result

pytestmark = pytest.mark.slow


def _check_exports(pane, tmp_path, expected_header, expected_rows):
    """CSV has the header and the expected number of rows; the PNG loads (SVG: test_svg_export)."""
    pane.export_csv(tmp_path / "t.csv")
    with open(tmp_path / "t.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == tuple(expected_header)
    assert len(rows) - 1 == expected_rows
    pane.export_image(tmp_path / "t.png")
    assert not QImage(str(tmp_path / "t.png")).isNull()
    return rows


def _render(pane, controller, index):
    controller.request_select(index)
    pane.render(controller.steps[index])


def test_attention_prefill_and_decode_maps(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.attention import TILE, AttentionPane
    from llm_lens.desktop.widgets.token_text import visible_text

    pane = AttentionPane(ran)
    qtbot.addWidget(pane)
    pane.resize(700, 450)
    pane.layer_box.setValue(4)
    pane.head_box.setValue(4)
    amap = wait_result(qtbot, ran, "attention_map", layer=4, head=4, max_size=256)
    _render(pane, ran, 0)
    n = len(ran.prompt)
    assert not amap.pooled and amap.weights.shape == (n, n)
    np.testing.assert_array_equal(pane.matrix, amap.weights)
    image = pane.image.image
    np.testing.assert_array_equal(image[:n, :n], amap.weights)
    assert np.isnan(image[n:]).all() and np.isnan(image[:, n:]).all()  # not read yet
    assert pane.labels == [visible_text(t.text) for t in ran.prompt.tokens]
    left = pane.map_plot.getAxis("left")._tickLevels[0]
    assert all(label == pane.labels[int(pos)] for pos, label in left)
    assert "head 4 shares KV head 1 with heads 3, 5" in pane.header.text()

    last = ran.steps[-1]
    _render(pane, ran, last.index)
    size = n + last.index
    assert pane.matrix.shape == (size, size)
    np.testing.assert_array_equal(pane.matrix[size - 1], last.attention[4, 4])
    np.testing.assert_array_equal(pane.matrix[size - 2, : size - 1], ran.steps[-2].attention[4, 4])
    np.testing.assert_array_equal(pane.matrix[:n, :n], amap.weights)
    assert pane.image.image.shape == image.shape  # stable between prefill and decode
    assert pane.labels[n:] == [visible_text(s.token.text) for s in ran.steps[: last.index]]
    grid = pane.tiles.image
    assert grid.shape == (ran.info.num_layers * TILE, ran.info.num_heads * TILE)
    tile = grid[4 * TILE : 5 * TILE, 4 * TILE : 5 * TILE]
    row = last.attention[4, 4]
    assert math.isclose(float(tile.max()), float(row.max()), rel_tol=1e-6)

    pane.tiles.sig_clicked.emit(7 * TILE + 3.0, 2 * TILE + 5.0)  # as a mouse click emits it
    assert (pane.layer_box.value(), pane.head_box.value()) == (7, 2)
    rows = _check_exports(
        pane,
        tmp_path,
        ("query position", "query token", "key position", "key token", "weight"),
        size * (size + 1) // 2,
    )
    assert float(rows[-1][4]) == pytest.approx(float(last.attention[4, 4][-1]))


def test_attention_overview_at_prefill(qtbot, ran):
    from llm_lens.desktop.panes.attention import TILE, AttentionPane

    pane = AttentionPane(ran)
    qtbot.addWidget(pane)
    thumbs = wait_result(qtbot, ran, "attention_overview")
    wait_result(qtbot, ran, "attention_map", layer=0, head=0, max_size=256)
    _render(pane, ran, 0)
    layers, heads = ran.info.num_layers, ran.info.num_heads
    np.testing.assert_array_equal(
        pane.tiles.image[TILE : 2 * TILE, 2 * TILE : 3 * TILE], thumbs[1, 2]
    )
    assert pane.tiles.image.shape == (layers * TILE, heads * TILE)


def test_a_long_prompts_overview_shows_the_recorded_rows(qtbot, ran, monkeypatch):
    """Past OVERVIEW_TOKENS the prefill's overview tiles are each head's recorded last row
    (asking nothing of the worker) and the header says why."""
    from llm_lens.desktop.panes.attention import TILE, AttentionPane, strip
    from llm_lens.desktop.panes.attention import pane as attention_pane

    monkeypatch.setattr(attention_pane, "OVERVIEW_TOKENS", 4)
    pane = AttentionPane(ran)
    qtbot.addWidget(pane)
    asked: list[str] = []
    request = ran.request_analysis
    monkeypatch.setattr(
        ran, "request_analysis", lambda kind, **a: (asked.append(kind), request(kind, **a))[1]
    )
    _render(pane, ran, 0)
    assert "attention_overview" not in asked
    rows = strip(np.asarray(ran.steps[0].attention), TILE)
    np.testing.assert_array_equal(pane.tiles.image[0, 0:TILE], rows[0, 0])
    assert "each head's last row" in pane.header.text()


def test_positions_pane_is_the_models_rope(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.positions import PositionsPane

    pane = PositionsPane(ran)
    qtbot.addWidget(pane)
    n = len(ran.prompt)
    view = wait_result(qtbot, ran, "positions", positions=n)
    pane.render(ran.current_step())
    info = ran.info
    rope = view.rope[0]
    # the model's own rotary module, not a recomputation from θ
    np.testing.assert_array_equal(
        rope.inv_freq, ran.worker.workbench.engine.model.model.rotary_emb.inv_freq
    )
    _x, y = pane.freq_curve.getOriginalDataset()
    np.testing.assert_array_equal(y, rope.inv_freq)
    np.testing.assert_array_equal(pane.angles.image, rope.angles)
    assert pane.angles.image.shape == (n, info.head_dim // 2)
    _x, score = pane.score_curve.getData()
    np.testing.assert_array_equal(score, rope.score_vs_distance)
    text = pane.summary.text()
    assert f"θ = {info.rope_theta:g}" in text and "RoPE from the model's rotary module" in text
    assert (
        f"all {info.head_dim} dimensions of each head rotated in {info.head_dim // 2} pairs" in text
    )
    assert pane.rope_choice.isHidden()  # one rotary set
    rows = _check_exports(pane, tmp_path, ("pair", "inv_freq", "wavelength"), info.head_dim // 2)
    assert float(rows[1][2]) == pytest.approx(2 * np.pi)  # pair 0 turns once per 2π tokens
    assert float(rows[-1][1]) == pytest.approx(float(rope.inv_freq[-1]), rel=1e-6)


def test_embeddings_vocabulary_overlay_and_neighbours(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.embeddings import EmbeddingsPane

    pane = EmbeddingsPane(ran)
    qtbot.addWidget(pane)
    calls = []
    original = pane.vocab.setData
    pane.vocab.setData = lambda *a, **k: (calls.append(1), original(*a, **k))
    proj = wait_result(qtbot, ran, "embedding_projection")
    for index in range(len(ran.steps)):
        _render(pane, ran, index)
    assert len(calls) == 1 and pane.vocab_set_count == 1
    assert len(pane.vocab.data) == ran.info.vocab_size
    ids = list(dict.fromkeys(ran.prompt.ids))
    np.testing.assert_array_equal(np.column_stack(pane.prompt_dots.getData()), proj.coords[ids])
    response = list(dict.fromkeys(s.token.id for s in ran.steps))
    np.testing.assert_array_equal(
        np.column_stack(pane.response_dots.getData()), proj.coords[response]
    )
    _render(pane, ran, 1)  # earlier step: fewer response tokens, still no vocabulary setData
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
    rows = _check_exports(
        pane,
        tmp_path,
        ("token id", "text", "x", "y"),
        len(dict.fromkeys(pane.prompt_ids + pane.response_ids)),
    )
    assert int(rows[1][0]) == ran.prompt.ids[0]
    assert float(rows[1][2]) == pytest.approx(float(proj.coords[ran.prompt.ids[0], 0]))


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
    _check_exports(pane, tmp_path, ("position", "token", "layer", "x", "y"), n * (layers + 1))


def test_svg_export(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.attention import AttentionPane
    from llm_lens.desktop.panes.embeddings import EmbeddingsPane
    from llm_lens.desktop.panes.positions import PositionsPane

    wait_result(qtbot, ran, "attention_map", layer=0, head=0, max_size=256)
    wait_result(qtbot, ran, "embedding_projection")
    wait_result(qtbot, ran, "positions", positions=len(ran.prompt))
    for cls in (PositionsPane, AttentionPane, EmbeddingsPane):
        pane = cls(ran)
        qtbot.addWidget(pane)
        pane.render(ran.current_step())
        path = tmp_path / f"{cls.__name__}.svg"
        pane.export_image(path)
        assert ET.parse(path).getroot().tag.endswith("svg")


def test_pooling_helpers():
    from llm_lens.core.attention import pool_rows
    from llm_lens.desktop.panes.attention import strip
    from llm_lens.desktop.widgets.token_text import visible_text

    w = np.arange(25, dtype=np.float32).reshape(5, 5)
    np.testing.assert_array_equal(pool_rows(w, 2), [[6, 8, 9], [16, 18, 19], [21, 23, 24]])
    np.testing.assert_array_equal(strip(np.array([1.0, 5, 2, 0]), 8), [1, 1, 5, 5, 2, 2, 0, 0])
    np.testing.assert_array_equal(strip(np.arange(64.0), 32), np.arange(1.0, 64, 2))
    assert visible_text(" a\n") == "·a↵" and visible_text("") == "∅"


def test_the_maps_beside_an_asked_map_are_computed_ahead(qtbot, ran, monkeypatch):
    """After one head's map of layer 5 (taking long enough: here any time; one head's alone, as
    for a long prompt), the worker computes the maps a spin box's step away while idle, into
    the model's memo: layers 6 and 4, heads 3 and 1. Asking for one of them then runs no
    attention module and gives what a fresh computation gives."""
    from llm_lens.core import attention
    from llm_lens.core.attention import prompt_maps
    from llm_lens.core.runs import budget

    monkeypatch.setattr(budget, "AHEAD_AFTER_MS", 0.0)
    monkeypatch.setattr(prompt_maps, "EVERY_HEAD_SCORES", 0)
    engine = ran.worker.workbench.engine
    wait_result(qtbot, ran, "attention_map", layer=5, head=2, max_size=512)
    guessed = {(6, 2), (5, 3), (4, 2), (5, 1)}
    qtbot.waitUntil(lambda: guessed <= set(engine.map_memo.get("maps", {})), timeout=30_000)
    calls: list[int] = []
    hooks = [engine.anatomy.attn[n].register_forward_pre_hook(lambda *_a: calls.append(1))
             for n in (4, 5, 6)]  # fmt: skip
    try:
        got = wait_result(qtbot, ran, "attention_map", layer=6, head=2, max_size=512)
        other = wait_result(qtbot, ran, "attention_map", layer=5, head=3, max_size=512)
    finally:
        for hook in hooks:
            hook.remove()
    assert calls == []
    run = ran.worker.workbench.store.runs[ran.run_id]
    for amap, (layer, head) in ((got, (6, 2)), (other, (5, 3))):
        engine.map_memo.clear()
        fresh = attention.attention_map(engine, run.cache, run.prefill.hidden, layer, head, 512)
        np.testing.assert_array_equal(amap.weights, fresh.weights)
