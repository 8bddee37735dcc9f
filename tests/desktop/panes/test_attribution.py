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
    qtbot.waitUntil(lambda: tokens.chip_step(n + 2) == 2, timeout=5_000)  # the final render
    assert tokens.chip_step(n - 1) == -1
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


def test_the_pane_asks_once_per_step_and_vs_and_reuses_the_result(qtbot, window_ran):
    """Each (step, vs) is computed once, on the model's thread, and shown again from the
    controller's cache: repaints, leaving and coming back ask nothing more of the worker."""
    import threading

    win = window_ran
    ctl, pane = win.controller, win.panes["Why this token?"]
    asked, threads, drawn = [], [], []
    submit, draw = ctl.worker.submit, pane._draw

    def counting(kind, key, job, ahead=()):
        if kind == "explain":
            asked.append(key)

            def run(bench):
                threads.append(threading.current_thread())
                return job(bench)

            return submit(kind, key, run, ahead)
        return submit(kind, key, job, ahead)

    ctl.worker.submit = counting
    pane._draw = lambda x: (drawn.append(x), draw(x))
    ctl.request_explain(2)
    qtbot.waitUntil(lambda: pane.result is not None and pane.result.step == 2, timeout=90_000)
    first = pane.result
    for _ in range(5):  # repaints (a burst of tokens, a resize) reuse the result
        pane.render(ctl.current_step())
    ctl.request_explain(1)
    qtbot.waitUntil(lambda: pane.result.step == 1, timeout=90_000)
    ctl.request_explain(2)  # back: the very same record, drawn again without a pass
    qtbot.waitUntil(lambda: pane.result is first, timeout=10_000)
    pane.render(ctl.current_step())
    assert [dict(k[2:]) for k in asked] == [{"step": 2, "vs": None}, {"step": 1, "vs": None}]
    assert [x.step for x in drawn] == [2, 1, 2] and drawn[2] is first
    assert threads and all(t is not threading.main_thread() for t in threads)


def test_the_header_says_what_is_held_for_a_post_norm_model(loaded):
    """Gemma 2: the view names the post-attention norms held at this step's scale and the
    final soft-cap that does not split."""
    from llm_lens.core.explain.attribution import explain
    from llm_lens.desktop.panes.attribution import split_text
    from tests.core.explain.test_explain import gemma2_step

    engine, step = gemma2_step(loaded)
    lg = explain(engine, step).logits
    text = split_text(lg)
    assert "post-attention norm" in text and "held at" in text
    assert f"final soft-cap ({lg.after_unembed:+.3f}" in text


def test_a_long_context_is_explained_only_when_asked(qtbot, window_ran, monkeypatch):
    """Past AUTO_TOKENS of context a shown, resting selection asks nothing of the worker (the
    pass would cost seconds and gigabytes at the full context); Explain still does."""
    from llm_lens.desktop.panes import attribution

    win = window_ran
    ctl, pane = win.controller, win.panes["Why this token?"]
    win.docks["Why this token?"].show()
    win.docks["Why this token?"].raise_()
    qtbot.waitUntil(pane.isVisible, timeout=5_000)
    monkeypatch.setattr(attribution, "AUTO_TOKENS", 8)  # the run's context is ~40 tokens
    asked: list[object] = []
    submit = ctl.worker.submit

    def counting(kind, key, job, ahead=()):
        if kind == "explain":
            asked.append(key)
        return submit(kind, key, job, ahead)

    monkeypatch.setattr(ctl.worker, "submit", counting)
    ctl.request_select(3)
    pane.settled = None
    pane._on_settled()
    qtbot.wait(attribution.SETTLE_MS + 300)
    assert asked == [] and "press Explain" in pane.header.text()
    assert "tokens of context" in pane.header.text()
    pane.explain_step(3)
    qtbot.waitUntil(lambda: bool(asked), timeout=10_000)


def test_another_steps_plots_are_faded_and_named_while_a_step_computes(qtbot, window_ran):
    """While step 1 is explained, step 2's plots stay up: faded, and the header says whose
    they are (they stayed up unmarked); once step 1's result comes, it is shown unfaded."""
    win = window_ran
    ctl, pane = win.controller, win.panes["Why this token?"]
    ctl.request_explain(2)
    qtbot.waitUntil(lambda: pane.result is not None and pane.result.step == 2, timeout=90_000)
    assert not pane.stale and not pane._fade.isEnabled()
    ctl.request_explain(1)
    pane.render(ctl.current_step())  # no event processed since: step 1 is on the worker
    assert pane.stale and pane._fade.isEnabled() and pane._fade.opacity() < 0.5
    assert "faded below: step 2's explanation" in pane.header.text()
    assert pane.explainer() is None  # the card tells nothing of step 2 as if it were step 1
    qtbot.waitUntil(lambda: pane.result.step == 1, timeout=90_000)
    assert not pane.stale and not pane._fade.isEnabled()
    assert pane.header.text().startswith("step 1:")
    assert pane.explainer() is not None
    pane.clear()
    assert not pane.stale
