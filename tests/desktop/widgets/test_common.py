"""desktop.widgets.common: a row that wraps instead of widening its window, and one-line texts
that elide with the whole text in their tooltip."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize
from PySide6.QtWidgets import QLabel, QPushButton, QWidget

from llm_lens.desktop.widgets.common import ElidedLabel, FlowLayout, LineText, group


def _row(qtbot, n: int = 6) -> tuple[QWidget, FlowLayout, list[QPushButton]]:
    box = QWidget()
    qtbot.addWidget(box)
    layout = FlowLayout(box, spacing=6)
    buttons = [QPushButton(f"button {i}") for i in range(n)]
    for button in buttons:
        button.setFixedSize(100, 20)
        layout.addWidget(button)
    return box, layout, buttons


def test_a_flow_layout_wraps_onto_lines_and_needs_their_height(qtbot):
    _box, layout, buttons = _row(qtbot)
    assert layout.count() == 6 and layout.itemAt(6) is None
    assert layout.sizeHint() == QSize(6 * 100 + 5 * 6, 20)  # one line of every item
    assert layout.minimumSize() == QSize(100, 20)  # as narrow as the widest item
    layout.setGeometry(QRect(0, 0, 320, 200))  # three buttons a line: 3·100 + 2·6 ≤ 320
    tops = [b.geometry().top() for b in buttons]
    lefts = [b.geometry().left() for b in buttons]
    assert tops == [0, 0, 0, 26, 26, 26] and lefts == [0, 106, 212] * 2
    assert layout.heightForWidth(320) == 46
    assert layout.heightForWidth(1000) == 20
    assert layout.heightForWidth(100) == 6 * 20 + 5 * 6
    assert layout.takeAt(0).widget() is buttons[0] and layout.count() == 5


def test_a_group_keeps_its_widgets_on_one_line(qtbot):
    label, box = QLabel("top-k"), QPushButton("5")
    row = group(label, box, spacing=3)
    qtbot.addWidget(row)
    assert row.layout().count() == 2 and row.layout().spacing() == 3
    assert label.parent() is row and box.parent() is row


def test_an_elided_label_is_cut_with_its_text_in_the_tooltip(qtbot):
    text = "a label far longer than the few characters of room it is given " * 2
    label = ElidedLabel(text, min_chars=8)
    qtbot.addWidget(label)
    metrics = label.fontMetrics()
    assert label.minimumSizeHint().width() <= metrics.averageCharWidth() * 8
    label.resize(80, 30)
    label.show()
    qtbot.waitExposed(label)
    label.grab()  # paints
    assert label.is_elided() and label.text() == text and label.toolTip() == text
    label.resize(metrics.horizontalAdvance(text) + 20, 30)
    label.grab()
    assert not label.is_elided() and label.toolTip() == ""


def test_a_line_text_keeps_its_size_whatever_its_text(qtbot):
    line = LineText("short", min_chars=8, chars=40)
    qtbot.addWidget(line)
    hint, minimum = line.sizeHint(), line.minimumSizeHint()
    width = line.fontMetrics().averageCharWidth()
    assert hint.width() == 40 * width and minimum.width() == 8 * width
    line.setText("a text long enough to be cut with an ellipsis in a narrow line " * 3)
    assert line.sizeHint() == hint and line.minimumSizeHint() == minimum
    line.resize(60, hint.height())
    line.grab()
    assert line.toolTip() == line.text()
    line.setText("ok")
    line.resize(200, hint.height())
    line.grab()
    assert line.text() == "ok" and line.toolTip() == ""


def test_ten_tabs_at_1366_keep_their_names(qtbot, tmp_path, monkeypatch):
    """With Compare, Branches and Beam search open, the left group holds ten tabs at 1366 px:
    each keeps its whole name (the bar scrolls), not "To…", "Atte…"."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QTabBar

    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path))
    from llm_lens.desktop.window.main_window import MainWindow

    win = MainWindow()
    win.sessions.confirm_close = False
    qtbot.addWidget(win)
    win.resize_to(1366, 768)
    win.show()
    qtbot.waitExposed(win)
    win.open_compare()
    win.open_branch()
    win.open_beam()
    qtbot.wait(100)
    direct = Qt.FindChildOption.FindDirectChildrenOnly
    bars = [b for b in win.findChildren(QTabBar, options=direct) if b.isVisible()]
    widest = max(bars, key=lambda b: b.count())
    assert widest.count() >= 10
    for bar in bars:
        assert bar.elideMode() == Qt.TextElideMode.ElideNone and bar.usesScrollButtons()
        metrics = bar.fontMetrics()
        for i in range(bar.count()):
            assert bar.tabRect(i).width() > metrics.horizontalAdvance(bar.tabText(i)), bar.tabText(
                i
            )
    win.controller.shutdown()
    win.close()
