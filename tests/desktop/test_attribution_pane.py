"""The "Why this token?" pane in the real window: the why? entry on a token, the drawn numbers,
and the links to the Attention pane."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.desktop.conftest import wait_result


@pytest.fixture
def window_ran(qtbot, loaded_window):
    from llm_lens.core.sampling import GREEDY

    win = loaded_window
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        win.controller.request_run("Explain transformers like I am 12", True, GREEDY, 4)
    qtbot.wait(50)
    return win


def test_why_on_a_token_explains_its_step(qtbot, window_ran):
    win = window_ran
    ctl, pane = win.controller, win.panes["Why this token?"]
    tokens = win.panes["Tokens"]
    n = len(ctl.prompt)
    assert tokens.chip_step(n - 1) == -1 and tokens.chip_step(n + 2) == 2
    # the response text maps characters back to the step that wrote them
    text = win.prompt_panel.response.toPlainText()
    first = len(ctl.steps[0].token.text)
    assert text.startswith(ctl.steps[0].token.text)
    assert win.prompt_panel.response_step(0) == 0
    assert win.prompt_panel.response_step(first) == 1
    ctl.request_explain(2)  # what the context menu's "Why this token?" does
    assert ctl.selected == 2 and win.docks["Why this token?"].isVisible()
    x = wait_result(qtbot, ctl, "explain", step=2, vs=None)
    qtbot.waitUntil(lambda: pane.result is x, timeout=30_000)
    step = ctl.steps[2]
    assert x.token_text == step.token.text
    assert x.logits.logit == pytest.approx(float(step.logits[step.token.id]), rel=1e-4)
    # bars and heatmap show the split
    _, heights = pane.attn_bars.opts["x"], pane.attn_bars.opts["height"]
    np.testing.assert_allclose(heights, x.logits.attn)
    np.testing.assert_allclose(pane.mlp_bars.opts["height"], x.logits.mlp)
    assert pane.heads.image.shape == (30, 9)
    assert "held at" in pane.header.text()
    # input chips are the context, coloured by gradient × input
    assert len(pane.chips.chips) == step.position + 1
    assert "gradient × input" in pane.inputs_note.text()
    # a head click shows that head in the Attention pane
    pane.head_clicked(7.5, 4.2)
    attention = win.panes["Attention"]
    assert (attention.layer_box.value(), attention.head_box.value()) == (7, 4)
    # an attention edge of the graph: its layer and dominant head, its source token marked
    g = x.graph
    drawn = pane.flow.edges
    assert len(drawn) == g.kept(pane.threshold.value() / 100).sum() > 0
    attn = [e for e in drawn if g.kind[e] == 0 and g.src_pos[e] != g.dst_pos[e]]
    edge = int(attn[0])
    pane.edge_clicked(edge)
    layer, head = int(g.src_level[edge]) // 2, int(g.head_shares[edge].argmax())
    assert (attention.layer_box.value(), attention.head_box.value()) == (layer, head)
    assert pane.chips.selected == int(g.src_pos[edge])
    # a nearest-edge click lands on the edge under the pointer
    i = list(drawn).index(edge)
    mid = pane.flow._xy[i].mean(axis=0)
    assert pane.flow.nearest(mid[0], mid[1], 0.01, 0.01) == i
    # moving the threshold up prunes the graph
    before = len(pane.flow.edges)
    pane.threshold.setValue(30)
    assert len(pane.flow.edges) < before
    shot = os.environ.get("LLM_LENS_EXPLAIN_SHOT")
    if shot:
        pane.threshold.setValue(4)
        win.resize(1366, 768)
        for tab in range(3):
            pane.tabs.setCurrentIndex(tab)
            qtbot.wait(300)
            win.grab().save(f"{shot}-{tab}.png", "PNG")


def test_a_vs_token_explains_the_difference(qtbot, window_ran):
    win = window_ran
    ctl, pane = win.controller, win.panes["Why this token?"]
    win.docks["Why this token?"].raise_()
    ctl.request_select(2)  # shown, not asked: explained once the selection rests
    qtbot.waitUntil(lambda: "rests" in pane.header.text(), timeout=10_000)
    qtbot.waitUntil(lambda: pane.result is not None and pane.result.step == 2, timeout=90_000)
    ctl.request_explain(1)
    qtbot.waitUntil(lambda: pane.result.step == 1, timeout=60_000)
    # the alternatives offered are step 1's own next most likely tokens
    assert pane.vs_ids[1] == int(ctl.steps[1].top_ids[1]) and pane.vs_box.currentIndex() == 0
    pane.vs_box.setCurrentIndex(1)
    vs = pane.vs_ids[1]
    x = wait_result(qtbot, ctl, "explain", step=1, vs=vs)
    qtbot.waitUntil(lambda: pane.result is x, timeout=30_000)
    step = ctl.steps[1]
    want = float(step.logits[step.token.id] - step.logits[vs])
    assert x.logits.logit == pytest.approx(want, rel=1e-4, abs=1e-4)
    assert "− logit" in pane.header.text()
