"""desktop.panes.attention_lines: the line view of a long prompt's attention."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPoint

from llm_lens.core.sampling import GREEDY
from tests.desktop.conftest import wait_result


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
