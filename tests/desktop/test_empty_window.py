"""The first screen: the left tab group opens on Tokens, the journey's first pane."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QTabBar

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_the_first_group_opens_on_tokens(qtbot, loaded_window, size):
    from llm_lens.desktop.window.window_layout import raise_first

    win = loaded_window
    win.resize_to(*size)
    win.arrange()
    raise_first(win.docks, win.width())
    qtbot.wait(50)
    bars = [b for b in win.findChildren(QTabBar) if b.count() > 1]
    names = [[b.tabText(i) for i in range(b.count())] for b in bars]
    first = next(b for b, n in zip(bars, names, strict=True) if "Tokens" in n)
    assert first.tabText(first.currentIndex()) == "Tokens", names
