"""desktop.panes.layers: the layer stack plots the records' numbers, and the panes export SVG."""

from __future__ import annotations

import numpy as np
import pytest

from tests.desktop.conftest import wait_result
from tests.desktop.panes.helpers import check_exports, check_svg_exports, curve, render_step

pytestmark = pytest.mark.slow


def test_layer_stack_norms_lens_and_prompt_heatmap(qtbot, ran, tmp_path, monkeypatch):
    from llm_lens.desktop.panes.layers import WAIT_TEXT, LayerStackPane, first_agreement, shown

    pane = LayerStackPane(ran)
    qtbot.addWidget(pane)
    step = ran.steps[2]
    ran.request_select(2)
    lens = wait_result(qtbot, ran, "lens", step=2, k=5)
    pane.render(step)

    layers = ran.info.num_layers
    x, y = curve(pane.resid_curve)
    np.testing.assert_array_equal(x, np.arange(layers + 1))
    np.testing.assert_allclose(y, step.residual_norms)
    x, y = curve(pane.attn_curve)
    np.testing.assert_array_equal(x, np.arange(1, layers + 1))
    np.testing.assert_allclose(y, np.linalg.norm(step.attn_update, axis=-1))
    np.testing.assert_allclose(curve(pane.mlp_curve)[1], np.linalg.norm(step.mlp_update, axis=-1))

    # the table is the LensResult, and the final prediction is marked where it occurs
    table = pane.lens_table
    assert (table.rowCount(), table.columnCount()) == lens.top_ids.shape == (layers + 1, 5)
    first = first_agreement(lens)
    assert first is not None and lens.top_ids[first, 0] == lens.final_id == step.top_ids[0]
    for r in range(layers + 1):
        for c in range(5):
            item = table.item(r, c)
            assert item.text() == f"{lens.top_probs[r, c]:.2f} {shown(lens.top_texts[r][c])}"
            assert item.font().bold() == (int(lens.top_ids[r, c]) == lens.final_id)
        assert table.verticalHeaderItem(r).text().endswith("★") == (r == first)
    assert pane.agree_line.isVisible() and pane.agree_line.value() == first
    assert not pane.tabs.isTabEnabled(1)  # the prompt heatmap belongs to the prefill

    rows = check_exports(pane, tmp_path, layers + 1)
    assert float(rows[0][1]) == pytest.approx(float(step.residual_norms[0]), rel=1e-6)
    assert rows[0][2] == "" and float(rows[2][2]) == pytest.approx(
        float(np.linalg.norm(step.attn_update[1])), rel=1e-6
    )
    assert rows[-1][4] == lens.top_texts[-1][0]

    # prefill: the heatmap image is the prompt lens' top-1 probability
    ran.request_select(0)
    prompt_lens = wait_result(qtbot, ran, "prompt_lens")
    wait_result(qtbot, ran, "lens", step=0, k=5)
    pane.render(ran.steps[0])
    assert pane.tabs.isTabEnabled(1)
    np.testing.assert_array_equal(pane.heat_image.image, prompt_lens.top1_probs)
    assert pane.heat_image.image.shape == (layers + 1, len(ran.prompt))
    hover = pane.hover_text(layers, 3)
    assert f"'{shown(prompt_lens.top1_texts[layers][3])}'" in hover
    assert f"'{shown(ran.prompt.tokens[3].text)}'" in hover
    assert pane.hover_text(layers + 1, 0) == ""

    # a prompt past PROMPT_LENS_TOKENS: not asked for, and the pane says why
    from llm_lens.desktop.panes.layers import pane as layers_pane  # where the pane reads it

    asked_long: list[str] = []
    request = ran.request_analysis
    monkeypatch.setattr(layers_pane, "PROMPT_LENS_TOKENS", 4)
    monkeypatch.setattr(
        ran, "request_analysis", lambda kind, **a: (asked_long.append(kind), request(kind, **a))[1]
    )
    pane._prompt_lens = None
    pane.render(ran.steps[0])
    assert "prompt_lens" not in asked_long and "up to 4 tokens" in pane.hover_label.text()
    monkeypatch.undo()

    # following a live run: no lens is asked for
    asked = []
    monkeypatch.setattr(ran, "request_analysis", lambda kind, **a: asked.append(kind))
    from dataclasses import replace

    ran.set_busy(True)
    ran.show_state(replace(ran.shown, follow_live=True))
    pane.render(ran.steps[4])
    assert asked == [] and WAIT_TEXT in pane.lens_status.text()
    assert pane.lens_table.rowCount() == 0  # the old step's lens is not shown for this one
    ran.set_busy(False)

    pane.render(None)
    assert curve(pane.resid_curve)[1].size == 0 and pane.lens_table.rowCount() == 0


def test_svg_export(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.kvcache import KVCachePane
    from llm_lens.desktop.panes.layers import LayerStackPane
    from llm_lens.desktop.panes.timing import TimingPane

    check_svg_exports(qtbot, ran, tmp_path, (LayerStackPane, KVCachePane, TimingPane))


@pytest.mark.slow
@pytest.mark.parametrize("width", [680, 636])
def test_a_lens_cell_cut_short_keeps_its_probability(qtbot, ran, width):
    """At the screenshots' pane widths a long token's cell is cut: the tail of its text goes,
    never the probability (it read '·type …' at 1920×1080)."""
    from PySide6.QtCore import Qt

    from llm_lens.desktop.panes.layers import LayerStackPane

    pane = LayerStackPane(ran)
    qtbot.addWidget(pane)
    pane.resize(width, 540)
    pane.show()
    last = ran.steps[-1].index
    ran.request_select(last)
    lens = wait_result(qtbot, ran, "lens", step=last, k=5)
    pane.render(ran.steps[last])
    qtbot.wait(50)
    table = pane.lens_table
    metrics = table.fontMetrics()
    cut = 0
    for r in range(table.rowCount()):
        for c in range(table.columnCount()):
            text = table.item(r, c).text()
            room = (
                table.columnWidth(c)
                - 2 * table.style().pixelMetric(table.style().PixelMetric.PM_FocusFrameHMargin)
                - 2
            )
            seen = metrics.elidedText(text, Qt.TextElideMode.ElideRight, room)
            cut += seen != text
            assert seen.startswith(f"{lens.top_probs[r, c]:.2f}"), (text, seen, room)
    assert cut or width > 640  # the narrow pane does cut some cells


@pytest.mark.slow
def test_the_card_is_no_empty_box_in_a_tall_pane(qtbot, ran):
    """At 1920×1080 the Layer stack's dock is 774 px tall: the plots and lens take the height,
    the card under them keeps its text's (it was a 220-px box round one line)."""
    from llm_lens.desktop.panes.layers import LayerStackPane
    from llm_lens.desktop.widgets.card import Card

    pane = LayerStackPane(ran)
    qtbot.addWidget(pane)
    card = Card()
    pane.attach_card(card)
    card.show_explainer(None, before_run=True)
    pane.resize(636, 774)
    pane.show()
    render_step(pane, ran, ran.steps[-1].index)
    qtbot.wait(50)
    assert card.height() <= card.sizeHint().height() + 4, (card.height(), card.sizeHint())
