"""desktop.panes.attention: the Attention pane's maps, overview tiles and grid marks, against
the real model's records and core's pooling."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QApplication

from llm_lens.desktop.panes.attention import overview_cell
from tests.desktop.conftest import wait_result
from tests.desktop.panes.helpers import check_exports, check_svg_exports, render_step


@pytest.mark.slow
def test_attention_prefill_and_decode_maps(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.attention import TILE, AttentionPane
    from llm_lens.desktop.widgets.token_text import visible_text

    pane = AttentionPane(ran)
    qtbot.addWidget(pane)
    pane.resize(700, 450)
    pane.layer_box.setValue(4)
    pane.head_box.setValue(4)
    amap = wait_result(qtbot, ran, "attention_map", layer=4, head=4, max_size=256)
    render_step(pane, ran, 0)
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
    render_step(pane, ran, last.index)
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
    rows = check_exports(
        pane,
        tmp_path,
        size * (size + 1) // 2,
        header=("query position", "query token", "key position", "key token", "weight"),
    )
    assert float(rows[-1][4]) == pytest.approx(float(last.attention[4, 4][-1]))


@pytest.mark.slow
def test_attention_overview_at_prefill(qtbot, ran):
    from llm_lens.desktop.panes.attention import TILE, AttentionPane

    pane = AttentionPane(ran)
    qtbot.addWidget(pane)
    thumbs = wait_result(qtbot, ran, "attention_overview")
    wait_result(qtbot, ran, "attention_map", layer=0, head=0, max_size=256)
    render_step(pane, ran, 0)
    layers, heads = ran.info.num_layers, ran.info.num_heads
    np.testing.assert_array_equal(
        pane.tiles.image[TILE : 2 * TILE, 2 * TILE : 3 * TILE], thumbs[1, 2]
    )
    assert pane.tiles.image.shape == (layers * TILE, heads * TILE)


@pytest.mark.slow
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
    render_step(pane, ran, 0)
    assert "attention_overview" not in asked
    rows = strip(np.asarray(ran.steps[0].attention), TILE)
    np.testing.assert_array_equal(pane.tiles.image[0, 0:TILE], rows[0, 0])
    assert "each head's last row" in pane.header.text()


@pytest.mark.slow
def test_svg_export(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.attention import AttentionPane
    from llm_lens.desktop.panes.embeddings import EmbeddingsPane
    from llm_lens.desktop.panes.positions import PositionsPane

    wait_result(qtbot, ran, "attention_map", layer=0, head=0, max_size=256)
    wait_result(qtbot, ran, "embedding_projection")
    wait_result(qtbot, ran, "positions", positions=len(ran.prompt))
    check_svg_exports(qtbot, ran, tmp_path, (PositionsPane, AttentionPane, EmbeddingsPane))


@pytest.mark.slow
def test_pooling_helpers():
    from llm_lens.core.attention import pool_rows
    from llm_lens.desktop.panes.attention import strip
    from llm_lens.desktop.widgets.token_text import visible_text

    w = np.arange(25, dtype=np.float32).reshape(5, 5)
    np.testing.assert_array_equal(pool_rows(w, 2), [[6, 8, 9], [16, 18, 19], [21, 23, 24]])
    np.testing.assert_array_equal(strip(np.array([1.0, 5, 2, 0]), 8), [1, 1, 5, 5, 2, 2, 0, 0])
    np.testing.assert_array_equal(strip(np.arange(64.0), 32), np.arange(1.0, 64, 2))
    assert visible_text(" a\n") == "·a↵" and visible_text("") == "∅"


@pytest.mark.parametrize("n", [5, 32, 47, 300])
def test_grid_marks_land_on_the_cell_that_shows_the_position(n):
    """The mark of position p in a decode tile is the strip cell where a one-hot row at p
    lands; in a prefill tile, the pooled cell of the overview."""
    from llm_lens.core.attention import pool_rows
    from llm_lens.desktop.panes.attention import TILE, strip, strip_bin

    for p in range(n):
        row = np.zeros(n, np.float32)
        row[p] = 1.0
        cells = np.flatnonzero(strip(row, TILE) == 1.0)
        assert strip_bin(n, TILE, p) in cells
        eye = np.eye(n, dtype=np.float32)
        block = max(1, -(-n // min(TILE, n)))
        pooled = pool_rows(eye, block)
        assert pooled[overview_cell(n, p), overview_cell(n, p)] == 1.0


def _settle(qtbot, ms=100):
    qtbot.wait(ms)
    QApplication.processEvents()


@pytest.mark.slow
def test_attention_map_at_step_0_after_a_run_frames_the_prompt(qtbot, ran):
    from llm_lens.desktop.panes.attention import AttentionPane
    from tests.desktop.conftest import wait_result

    pane = AttentionPane(ran)
    qtbot.addWidget(pane)
    pane.resize(640, 480)
    pane.show()
    wait_result(qtbot, ran, "attention_map", layer=0, head=0, max_size=256)
    n, last = len(ran.prompt), ran.steps[-1].index
    ran.request_select(last)
    pane.render(ran.steps[last])
    ran.request_select(0)
    pane.render(ran.steps[0])
    _settle(qtbot)
    vb = pane.map_plot.getViewBox()
    (x0, x1), (y0, y1) = vb.viewRange()
    assert (x0, x1, y0, y1) == pytest.approx((0, n, 0, n))
    vb.autoRange()  # what pyqtgraph's "A" button does
    (x0, x1), (y0, y1) = vb.viewRange()
    assert 0 <= x0 and x1 <= n and 0 <= y0 and y1 <= n and x1 - x0 > 0.9 * n
    metrics = QFontMetrics(pane.font())
    ticks = [pos for pos, _ in pane.map_plot.getAxis("left")._tickLevels[0]]
    assert len(ticks) >= 2
    spacing = (ticks[1] - ticks[0]) * vb.height() / (y1 - y0)
    assert spacing >= metrics.height() * 0.9, spacing


def _key_spans(pane):
    """Each key-axis label's left and right edge on screen, in order."""
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QFontMetricsF

    axis = pane.map_plot.getAxis("bottom")
    metrics = QFontMetricsF(axis.style.get("tickFont") or axis.font())
    vb = pane.map_plot.getViewBox()
    spans = []
    for x, text in sorted(axis._tickLevels[0]):
        centre = vb.mapViewToScene(QPointF(x, 0)).x()
        half = metrics.horizontalAdvance(text) / 2
        spans.append((centre - half, centre + half, text))
    return spans


@pytest.mark.slow
@pytest.mark.parametrize("size", [(680, 480), (636, 770)])
def test_the_key_axis_labels_as_many_tokens_as_fit(qtbot, ran, size):
    """A 38-token prompt's key axis was read off 3 labels (every k-th, k set by the widest);
    now each label is kept where its own width clears the last: many, none overlapping."""
    from llm_lens.desktop.panes.attention import AttentionPane

    pane = AttentionPane(ran)
    qtbot.addWidget(pane)
    pane.resize(*size)
    pane.show()
    wait_result(qtbot, ran, "attention_map", layer=0, head=0, max_size=256)
    last = ran.steps[-1].index
    ran.request_select(last)
    pane.render(ran.steps[last])
    _settle(qtbot)
    spans = _key_spans(pane)
    assert len(spans) >= 8, [t for *_, t in spans]
    for (_, right, _), (left, _, _) in zip(spans, spans[1:], strict=False):
        assert left > right, spans
    box = pane.map_plot.getViewBox().sceneBoundingRect()  # a label sticking out is not drawn
    assert box.left() - 1 <= spans[0][0] and spans[-1][1] <= box.right() + 1, (box, spans)
    for x, text in pane.map_plot.getAxis("bottom")._tickLevels[0]:
        assert text == pane.labels[int(x)]


@pytest.mark.slow
def test_a_long_prompt_turns_the_contrast_on(qtbot, ran, monkeypatch):
    """A prompt over LONG_PROMPT tokens: contrast on (a 0..1 scale showed it almost all black),
    the colour bar stretched below 1 and said in the header; unchecked, it stays off."""
    from llm_lens.desktop.panes.attention import AttentionPane
    from llm_lens.desktop.panes.attention import pane as pane_module

    monkeypatch.setattr(pane_module, "LONG_PROMPT", len(ran.prompt) - 1)
    pane = AttentionPane(ran)
    qtbot.addWidget(pane)
    wait_result(qtbot, ran, "attention_map", layer=0, head=0, max_size=256)
    render_step(pane, ran, 0)
    assert pane.contrast.isChecked()
    top = pane.bar.levels()[1]
    assert top < 1.0 and top == pytest.approx(pane._levels()[1])
    assert f"contrast: colours stretched to 0–{top:.3g}" in pane.header.text()
    pane.contrast.setChecked(False)
    render_step(pane, ran, 0)
    assert not pane.contrast.isChecked() and pane.bar.levels() == (0.0, 1.0)
    monkeypatch.setattr(pane_module, "LONG_PROMPT", len(ran.prompt))
    other = AttentionPane(ran)
    qtbot.addWidget(other)
    render_step(other, ran, 0)
    assert not other.contrast.isChecked()
