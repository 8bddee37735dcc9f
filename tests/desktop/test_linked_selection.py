"""One selected token in every pane, hover readouts, cards with the record's numbers, the tour.

Asserted on data each pane keeps for its marks (``pane.linked``), never on pixels.
"""

from __future__ import annotations

import html

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt

from llm_lens.core.positions import position_view
from llm_lens.core.sampling import GREEDY
from llm_lens.desktop.panes.attention import overview_cell
from tests.desktop.conftest import wait_result


def settle(qtbot, win, ms=300):
    qtbot.wait(ms)
    for pane in win.panes.values():
        pane.render_and_paint()


@pytest.fixture
def shown(qtbot, loaded_window):
    """The window after a 4-token greedy run, the prefill selected, its analyses in."""
    win, ctl = loaded_window, loaded_window.controller
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run("The bank of the river was steep", False, GREEDY, 4)
    ctl.request_select(0)
    att = win.panes["Attention"]
    wait_result(qtbot, ctl, "attention_map", layer=0, head=0, max_size=256)
    wait_result(qtbot, ctl, "attention_map", layer=0, head=0, max_size=1024)
    wait_result(qtbot, ctl, "attention_overview")
    wait_result(qtbot, ctl, "prompt_lens")
    wait_result(qtbot, ctl, "embedding_projection")
    win.panes["Embeddings"].mode.setCurrentIndex(1)
    wait_result(qtbot, ctl, "hidden_paths")
    settle(qtbot, win)
    win.panes["Embeddings"].mode.setCurrentIndex(0)
    settle(qtbot, win)
    assert att.matrix.shape[0] == len(ctl.prompt)
    return win


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


def test_the_tour_visits_every_pane(qtbot, shown):
    ctl = shown.controller
    tour = shown.open_tour()
    assert tour.visited == ["Tokens"] and ctl.token == len(ctl.prompt) and ctl.selected == 0
    said = []
    for _ in range(len(tour.stops) - 1):
        tour.next.click()
        said.append(tour.text.text())
        if tour.visited[-1] == "Attention":
            assert ctl.token == len(ctl.prompt) - 1
            assert html.escape(shown.cards["Attention"].explainer.headline) in said[-1]
    assert set(tour.visited) == set(shown.panes)
    assert ctl.selected == len(ctl.steps) - 1  # the last stops look at the whole run
    step = ctl.steps[-1]
    assert (
        f"{step.kv.formula_bytes:,} bytes" in said[tour.visited.index("KV cache") - 1]
    )  # the KV cache stop's own numbers
    tour.close()


def test_line_view_draws_the_strongest_lines_of_a_400_token_prompt(qtbot, controller):
    import time

    from llm_lens.desktop.panes.attention_lines import LIMIT, AttentionLinesPane

    pane = AttentionLinesPane(controller)
    qtbot.addWidget(pane)
    pane.resize(600, 500)
    pane.show()
    text = " ".join(f"w{i % 50}" for i in range(220))
    with qtbot.waitSignal(controller.sig_run_finished, timeout=120_000):
        controller.request_run(text, False, GREEDY, 3)
    n = len(controller.prompt)
    assert n >= 400
    controller.request_select(2)
    amap = wait_result(qtbot, controller, "attention_map", layer=0, head=0, max_size=1024)
    t0 = time.perf_counter()
    pane.render_and_paint()
    elapsed = time.perf_counter() - t0
    total = n + 2
    assert pane.matrix.shape == (total, total)
    np.testing.assert_allclose(pane.matrix[:n, :n], amap.weights)
    row = controller.steps[2].attention[0, 0]  # step 2's query is response token 1
    np.testing.assert_allclose(pane.matrix[n + 1, : row.shape[0]], row)
    q, k, w = pane.shown
    assert len(w) == LIMIT and pane.hidden_count == total * (total + 1) // 2 - LIMIT
    cells = np.sort(pane.matrix[np.tril_indices(total)])
    assert w.min() >= cells[-LIMIT]
    assert f"({pane.hidden_count:,} hidden)" in pane.status.text()
    controller.request_select_token(200)
    assert set(pane.shown[0].tolist()) == {200} and pane.view.selected == 200
    np.testing.assert_allclose(np.sort(pane.shown[2]), np.sort(pane.matrix[200, :201]))
    assert pane.scroll.verticalScrollBar().value() > 0  # row 200 was scrolled into view
    # hovering a token on the left selects it
    pane.scroll.verticalScrollBar().setValue(0)
    qtbot.wait(50)
    qtbot.mouseMove(pane.view, QPoint(20, int(4 + 10.5 * 16)))
    qtbot.waitUntil(lambda: controller.token == 10, timeout=2000)
    assert elapsed < 2.0, f"render took {elapsed:.2f} s"
    print(f"line view render on {total} tokens: {elapsed * 1e3:.0f} ms")


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
