"""desktop.startup.fit_check: the window-fit check can fail, naming what does not fit."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication


def _settle(qtbot, ms=100):
    qtbot.wait(ms)
    QApplication.processEvents()


def test_fit_check_finds_a_control_outside_the_window(qtbot, loaded_window):
    """The check can fail: a row of the prompt strip that cannot shrink pushes the window past
    the size asked; in a pane (whose minimum is held), the control is cut off instead."""
    from PySide6.QtWidgets import QPushButton

    from llm_lens.desktop.startup.fit_check import fit_problems

    win = loaded_window
    wide = QPushButton("a very wide button " * 20)
    win.panes["Logits"].layout().addWidget(wide)
    win.resize_to(1280, 720)
    _settle(qtbot)
    problems = fit_problems(win, (1280, 720))
    assert (win.width(), win.height()) == (1280, 720)
    assert any(p.startswith("Logits: QPushButton 'a very wide button") for p in problems)
    wide.setParent(None)
    win.prompt_panel.layout().addWidget(QPushButton("a very wide button " * 20))
    _settle(qtbot)
    problems = fit_problems(win, (1280, 720))
    assert problems and "larger than the 1280×720 asked for" in problems[0]


def test_fit_check_finds_a_legend_cut_off_by_its_plot(qtbot, loaded_window):
    """A legend wider than its plot is clipped by the view mid-word: the check names it."""
    import pyqtgraph as pg

    from llm_lens.desktop.startup.fit_check import fit_problems

    win = loaded_window
    win.resize_to(1366, 768)
    _settle(qtbot)
    plot = win.panes["Layer stack"].resid_plot
    kept, wide = plot.legend, pg.LegendItem(offset=(5, 5))
    wide.setParentItem(plot.vb)
    wide.addItem(pg.PlotDataItem(pen="w"), "a legend entry far wider than the plot it is drawn in")
    plot.legend = wide
    _settle(qtbot)
    try:
        problems = fit_problems(win, (1366, 768))
    finally:
        plot.legend = kept
        wide.scene().removeItem(wide)
    legends = [p for p in problems if "legend" in p]
    named = "Layer stack: the legend of plot 'residual stream norm'"
    assert legends and all(p.startswith(named) for p in legends)
    _settle(qtbot)
    assert fit_problems(win, (1366, 768)) == []
