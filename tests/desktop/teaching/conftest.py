"""The window after a short run with its analyses in, for the tests of linking, hover and tour;
a controller with no model, for the tests of cards and linking on panes made in the test."""

from __future__ import annotations

import pytest

from llm_lens.core.sampling import GREEDY
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


@pytest.fixture
def ctl(bare):
    """A controller with no model loaded (the desktop conftest's ``bare``), stopped afterwards."""
    return bare
