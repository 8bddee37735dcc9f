"""The tour as a newcomer meets it: beside the pane it explains (not on its figure) and inside
the screen, its text whole, its steps numbered 1..n under "n steps", Esc closing it wherever the
focus is, and tokenization explained on a token of the user's prompt."""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtTest import QTest

from llm_lens.desktop.teaching.tour import place_beside

SCREEN = QRect(0, 0, 1366, 768)


@pytest.mark.parametrize(
    ("target", "room"),
    [(QRect(0, 200, 500, 500), True), (QRect(866, 200, 500, 500), True),
     (QRect(0, 0, 1366, 400), True), (QRect(300, 0, 766, 500), True),
     (QRect(300, 100, 766, 600), False)],
)  # fmt: skip
def test_the_guide_stands_beside_its_target_inside_the_screen(target, room):
    size = QSize(440, 160)
    box = QRect(place_beside(size, target, SCREEN), size)
    assert SCREEN.contains(box), box
    if room:  # right, left, below or above: it does not cover the figure it explains
        assert not box.intersects(target), (box, target)


def test_a_box_larger_than_the_room_stays_on_screen():
    box = QRect(place_beside(QSize(600, 300), QRect(0, 0, 1366, 768), SCREEN), QSize(600, 300))
    assert SCREEN.contains(box)


@pytest.mark.slow
def test_the_tour_numbers_its_steps_shows_its_text_and_closes_on_esc(qtbot, loaded_window):
    from llm_lens.core.sampling import GREEDY

    win, ctl = loaded_window, loaded_window.controller
    win.resize_to(1366, 768)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run("Explain transformers like I am 12", True, GREEDY, 3)
    tour = win.open_tour()
    n = len(tour.stops)
    assert f"{n} steps" in tour.windowTitle()
    # tokenization is told on a token the user typed
    assert ctl.token < len(ctl.prompt) and not ctl.prompt.tokens[ctl.token].special
    assert "in the prompt" in win.cards["Tokens"].explainer.headline
    screen = win.screen().availableGeometry()
    numbers = []
    for index in range(n):
        qtbot.wait(20)
        numbers.append(int(re.match(r"<b>(\d+) · ", tour.text.text()).group(1)))
        label = tour.text
        assert label.height() >= label.heightForWidth(label.width()), tour.stops[index][0]
        assert screen.contains(tour.frameGeometry()), tour.stops[index][0]
        dock = win.docks[tour.stops[index][0]]
        if dock.isVisible() and not dock.isFloating():
            pane = QRect(dock.mapToGlobal(QPoint(0, 0)), dock.size())
            overlap = pane.intersected(tour.frameGeometry())
            area = overlap.width() * overlap.height() if overlap.isValid() else 0
            assert area < 0.25 * pane.width() * pane.height(), tour.stops[index][0]
        if index < n - 1:
            tour.next.click()
    assert numbers == list(range(1, n + 1))
    tour.go(0)
    QTest.keyClick(win.panes["Tokens"], Qt.Key.Key_Escape)  # the focus is in the main window
    assert not tour.isVisible()
