"""Head changes are offered only where a layer computes attention: the Attention grid and the
"Why this token?" heads map of a hybrid model offer none on its Mamba, gated-DeltaNet or short
convolution layer, and turn off / scale / mean on its attention layer (Falcon-H1's parallel
layers have both). Tiny random hybrid models (tests/hybrid_families.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from llm_lens.core.interventions import HeadEdit
from llm_lens.core.loop.engine import Engine
from llm_lens.core.sampling import GREEDY
from llm_lens.desktop.panes.attention.cells import TILE
from llm_lens.desktop.state.whatif import describe, head_changes
from tests.desktop.conftest import open_window
from tests.hybrid_families import hybrid_model

# a menu popped up offscreen: the plugin cannot raise it nor grab the keyboard
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")
# per family: do layers 0 and 1 compute attention?
ATTENTION = {
    "jamba": (False, True),  # Mamba, then attention
    "lfm2": (False, True),  # short convolution, then attention
    "qwen3_next": (False, True),  # gated DeltaNet (linear attention), then attention
    "falcon_h1": (True, True),  # attention and Mamba side by side in every layer
}
OFFERS = [
    "head {l}.{h} = 0",
    "head {l}.{h} × 0.5",
    "head {l}.{h} × 2",
    "head {l}.{h} = prompt mean",
]


def _offers(layer: int, head: int) -> list[str]:
    return [o.format(l=layer, h=head) for o in OFFERS]


@pytest.mark.parametrize("name", list(ATTENTION))
def test_the_grid_offers_heads_only_on_attention_layers(name, qtbot, bare, tokenizer) -> None:
    from llm_lens.desktop.panes.attention import AttentionPane

    info = Engine(hybrid_model(name, tokenizer)).info
    bare.use_model(info)
    pane = AttentionPane(bare)
    qtbot.addWidget(pane)
    pane._sync_model(info)  # as a render does: the grid is layers × heads
    for layer, attends in enumerate(ATTENTION[name]):
        offers = pane.head_changes(1.5 * TILE, (layer + 0.5) * TILE)  # head 1
        assert [describe(o) for o in offers] == (_offers(layer, 1) if attends else [])
    assert offers[0] == HeadEdit(1, 1, "scale", 0.0)  # layer 1 attends in every family
    assert bool(head_changes(0, 1, info)) == ATTENTION[name][0]


def test_an_unknown_model_offers_every_head() -> None:
    assert len(head_changes(3, 2)) == 4  # no ModelInfo: nothing says the layer has no heads


@pytest.fixture
def jamba_window(qtbot: Any, tmp_path: Any, monkeypatch: Any, tokenizer: Any) -> Any:
    """The window on a tiny random Jamba (layer 0 Mamba, layer 1 attention) saved as a folder,
    after a 2-token greedy run."""
    folder = Path(tmp_path / "tiny-jamba")
    hybrid_model("jamba", tokenizer).model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    win = open_window(qtbot, tmp_path, monkeypatch, str(folder))
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        win.controller.request_run("the cat sat", False, GREEDY, 2)
    qtbot.wait(50)
    yield win
    win.close()


def _front(qtbot: Any, win: Any, title: str) -> Any:
    win.docks[title].show()
    win.docks[title].raise_()
    qtbot.wait(50)
    QApplication.processEvents()
    pane = win.panes[title]
    pane.render_and_paint()
    return pane


def _menu_at(win: Any, plot: Any, x: float, y: float) -> list[str]:
    """A real right-click at view point (x, y) of ``plot``: the What-if menu's entries (after
    its disabled title); [] when no What-if menu opened."""
    view = plot.scene().views()[0]
    pos: QPoint = view.mapFromScene(plot.getViewBox().mapViewToScene(QPointF(x, y)))
    win.whatif_menus.menu = None
    for act in (QTest.mousePress, QTest.mouseRelease):
        act(view.viewport(), Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier, pos)
    menu = win.whatif_menus.menu
    if menu is None:
        return []
    menu.close()
    texts = [a.text() for a in menu.actions()[1:]]
    # every What-if menu ends with the patching sweep's entry, after a separator
    return texts[: texts.index("")] if "" in texts else texts


def test_right_click_on_a_mamba_layers_head_offers_no_head_change(qtbot, jamba_window) -> None:
    win, ctl = jamba_window, jamba_window.controller
    grid = _front(qtbot, win, "Attention").grid_plot
    assert _menu_at(win, grid, 0.5 * TILE, 0.5 * TILE) == []  # layer 0: Mamba
    assert _menu_at(win, grid, 0.5 * TILE, 1.5 * TILE) == _offers(1, 0)  # layer 1: attention
    why = _front(qtbot, win, "Why this token?")
    why.explain_step(len(ctl.steps) - 1)
    qtbot.waitUntil(lambda: why.result is not None, timeout=60_000)
    assert why.result.logits.heads.shape[0] == 2
    assert _menu_at(win, why.heads_plot, 2.5, 0.5) == []  # heatmap: x head, y layer
    assert _menu_at(win, why.heads_plot, 2.5, 1.5) == _offers(1, 2)
    assert ctl.whatif.active() == ()  # nothing was chosen
