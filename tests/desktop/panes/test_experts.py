"""Experts pane: a tiny random Mixtral loaded from a folder, run in the window, drawn.

The pane's images and marks are checked against the StepRecords' routing (itself tested against
the model's own router outputs in ``tests/core/test_experts.py``); a dense model's records make
the pane say there are no experts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtWidgets import QApplication

from llm_lens.core.sampling import GREEDY
from tests.core.test_experts import moe_model
from tests.desktop.conftest import open_window

PROMPT = "The quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def mixtral_folder(tmp_path_factory: Any, tokenizer: Any) -> Path:
    """A tiny random Mixtral saved as an ordinary model folder, as a user would bring one."""
    folder = tmp_path_factory.mktemp("tiny-mixtral")
    model = moe_model("mixtral", vocab=len(tokenizer), num_local_experts=6)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def mixtral_window(qtbot: Any, tmp_path: Any, monkeypatch: Any, mixtral_folder: Path) -> Any:
    win = open_window(qtbot, tmp_path, monkeypatch, str(mixtral_folder))
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        win.controller.request_run(PROMPT, False, GREEDY, 4)
    yield win
    win.close()


def _front(qtbot: Any, win: Any, title: str) -> Any:
    win.docks[title].raise_()
    qtbot.wait(50)
    QApplication.processEvents()
    pane = win.panes[title]
    pane.render_and_paint()
    return pane


def test_pane_shows_the_selected_tokens_routing(qtbot: Any, mixtral_window: Any) -> None:
    from llm_lens.core.experts import context_routing, routing_at
    from llm_lens.desktop.startup.fit_check import fit_problems

    win = mixtral_window
    ctl = win.controller
    win.resize_to(1366, 768)
    ctl.request_select(len(ctl.steps) - 1)
    pane = _front(qtbot, win, "Experts")
    step = ctl.current_step()
    assert step.routing is not None and pane.graphics.isVisible()
    assert not pane.dense_label.isVisible() and pane.layer_choice.isVisible()
    r = step.routing.row(-1)  # no token selected: the selected step's own query
    np.testing.assert_array_equal(pane.image.image, r.probs[:, 0])
    xs, ys = pane.chosen.getData()
    np.testing.assert_array_equal(xs - 0.5, r.experts[:, 0].ravel())
    np.testing.assert_array_equal(ys - 0.5, np.repeat(np.arange(3), 2))
    shown = [t.toPlainText() for t in pane._texts if t.isVisible()]
    assert shown == [f"{w:.2f}" for w in r.weights[:, 0].ravel()]
    # the colour scale is a probability's (it topped at the row's largest, 0.45, over a 0.62)
    assert pane.bar.levels() == (0.0, 1.0) and pane.image.levels.tolist() == [0.0, 1.0]
    assert max(float(w) for w in shown) <= 1.0 and float(r.probs.max()) <= 1.0
    assert "colour the router probability (0–1), numbers the chosen experts' weights" in (
        pane.header.text()
    )
    # right: every token read so far × expert, counted over the layers
    ctx = context_routing(ctl.steps)
    assert pane.token_image.image.shape == (ctx.rows, 6)
    counts = np.zeros((ctx.rows, 6))
    for layer in range(3):
        np.add.at(counts, (np.arange(ctx.rows)[:, None], ctx.experts[layer]), 1)
    np.testing.assert_array_equal(pane.token_image.image, counts)
    first = int(r.experts[0, 0, 0])
    assert f"layer 0 sent it to experts {first} ({r.weights[0, 0, 0]:.2f})" in pane.header.text()
    card = pane.card.explainer
    assert card is not None and f"experts {first} and" in card.headline
    assert fit_problems(win, (1366, 768)) == []

    # a click on a prompt token's row selects it; the left map follows that token
    pane._row_clicked(2.5)
    assert ctl.token == 2
    pane.render_and_paint()
    np.testing.assert_array_equal(pane.image.image, routing_at(ctl.steps, 2).probs[:, 0])
    # one layer's weights instead of the counts
    pane.layer_choice.setCurrentIndex(2)  # layer 1
    pane.render_and_paint()
    np.testing.assert_array_equal(pane.token_image.image, ctx.chosen_matrix()[1])
    # hover readouts: the cell's own numbers
    e0, w0 = (
        int(routing_at(ctl.steps, 2).experts[1, 0, 0]),
        routing_at(ctl.steps, 2).weights[1, 0, 0],
    )
    assert pane.cell_text(e0 + 0.5, 1.5).endswith(f"chosen, weight {w0:.3f}")
    assert f"layer 1 weight {w0:.3f}" in pane.token_cell_text(e0 + 0.5, 2.5)
    assert pane.cell_text(-1, 0) == "" and pane.token_cell_text(0, ctx.rows + 1) == ""
    header, rows = pane.csv_table()
    assert len(rows) == 3 * 6 and rows[0][0] == 2


def test_dense_model_says_it_has_no_experts(qtbot: Any, tokenizer: Any) -> None:
    from llm_lens.core.loop.engine import Engine, RunConfig
    from llm_lens.desktop.panes.experts import DENSE, ExpertsPane
    from llm_lens.desktop.state.controller import Controller
    from tests.conftest import make_tiny

    engine = Engine(make_tiny(tokenizer))
    run = engine.start(engine.tokenize("Hi there", chat=False), GREEDY, RunConfig(2))
    run.run_all()
    ctl = Controller()
    try:
        pane = ExpertsPane(ctl)
        qtbot.addWidget(pane)
        pane.resize(600, 400)
        pane.show()
        ctl.show_state(replace(ctl.shown, info=engine.info, prompt=run.prompt,
                               steps=tuple(run.steps), selected=1))  # fmt: skip
        pane.render(ctl.current_step())
        assert pane.dense_label.isVisible() and pane.dense_label.text() == DENSE
        assert not pane.graphics.isVisible() and pane.routing is None
        assert not pane.layer_choice.isVisible()
        assert pane.csv_table()[1] == []
    finally:
        ctl.shutdown()
