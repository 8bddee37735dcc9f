"""The window at laptop sizes, focus mode, and what a run changes in the layout."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from llm_lens.core.sampling import GREEDY

PROMPT = "Explain transformers like I am 12"


SIZES = [(1280, 720), (1366, 768), (1920, 1080)]


def _settle(qtbot, ms=100):
    qtbot.wait(ms)
    QApplication.processEvents()


def test_every_pane_fits_at_laptop_and_desktop_sizes(qtbot, loaded_window):
    from llm_lens.desktop.startup.fit_check import fit_problems, in_window, shown_in

    win = loaded_window
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        win.controller.request_run(PROMPT, True, GREEDY, 6)
    _settle(qtbot, 500)  # panes draw their data (long labels are the usual culprits)
    hint = win.minimumSizeHint()
    assert hint.width() <= 1280 and hint.height() <= 720
    for width, height in SIZES:
        win.resize_to(width, height)
        _settle(qtbot)
        assert (win.width(), win.height()) == (width, height)
        assert fit_problems(win, (width, height)) == []
        assert win.hidden_panes() == []
        front = [n for n, d in win.docks.items() if shown_in(win, d)]
        assert len(front) == (3 if width >= 1700 else 2)  # one tab group per column
        strip = in_window(win, win.centralWidget())
        plots = in_window(win, win.docks[front[0]])
        assert plots.height() > 2 * strip.height()  # the plots, not the response, get the room


def test_focus_mode_shows_one_pane_and_goes_back(qtbot, loaded_window):
    from llm_lens.desktop.startup.fit_check import in_window, shown_in

    win = loaded_window
    win.resize_to(1366, 768)
    _settle(qtbot)
    before = sorted(n for n, d in win.docks.items() if shown_in(win, d))
    win.toggle_focus(win.docks["Sampling"])
    _settle(qtbot)
    assert [n for n, d in win.docks.items() if shown_in(win, d)] == ["Sampling"]
    assert not win.centralWidget().isVisible()
    assert in_window(win, win.docks["Sampling"]).width() > 0.9 * win.width()
    win.toggle_focus()
    _settle(qtbot)
    assert sorted(n for n, d in win.docks.items() if shown_in(win, d)) == before
    assert win.centralWidget().isVisible()


def test_step_label_follows_a_run_that_grows_while_scrubbed_back(qtbot, loaded_window):
    ctl = loaded_window.controller
    panel = loaded_window.prompt_panel

    def scrub_back():
        if len(ctl.steps) >= 3 and ctl.selected != 1:
            ctl.request_select(1)

    ctl.sig_steps_changed.connect(scrub_back)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run(PROMPT, True, GREEDY, 10)
    ctl.sig_steps_changed.disconnect(scrub_back)
    assert ctl.selected == 1 and len(ctl.steps) == 10
    assert panel.step_label.text().startswith("1 / 9 · decode")


def test_empty_window_has_no_nonsense_axes(qtbot, tmp_path, monkeypatch):
    """Before any model: no '(x0.001)' SI prefixes, no tick labels on the heads overview."""
    import pyqtgraph as pg

    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path))
    from llm_lens.desktop.window.main_window import MainWindow

    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    _settle(qtbot)
    seen = 0
    for pane in win.panes.values():
        for view in pane.findChildren(pg.GraphicsView):
            for item in view.scene().items():
                if isinstance(item, pg.AxisItem) and item.isVisible():
                    seen += 1
                    assert "(x" not in item.labelString(), (pane.title, item.labelString())
    assert seen > 20
    grid = win.panes["Attention"].grid_plot
    assert grid.getAxis("left")._tickLevels == [[]]
    raw = win.panes["Sampling"].plots["raw"]
    assert raw.getViewBox().viewRange()[0] == [0.0, 1.0]
    win.controller.shutdown()
    win.close()


def test_what_a_run_writes_never_moves_the_docks(qtbot, loaded_window):
    """A run's labels, cards and axes change what the panes' contents would like; the docks stay
    where they are. A pane whose minimum followed its content (a label wrapping to one more
    line) re-laid out the whole window at a run's end and repainted every pane in one turn."""
    win = loaded_window
    for width, height in ((1366, 768), (1920, 1080)):
        win.resize_to(width, height)
        _settle(qtbot)
        before = {t: (d.minimumSizeHint(), d.geometry()) for t, d in win.docks.items()}
        with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
            win.controller.request_run(PROMPT, True, GREEDY, 6)
        _settle(qtbot, 500)
        after = {t: (d.minimumSizeHint(), d.geometry()) for t, d in win.docks.items()}
        assert after == before


def test_what_a_run_streams_into_the_centre_lays_out_nothing(qtbot, loaded_window):
    """The response box, the scrubber and the step label change with every token; none of
    them lays out the centre again, nor therefore the main window and its docks (a QLabel's
    every setText did, 30 times a second)."""
    from PySide6.QtCore import QEvent, QObject

    panel = loaded_window.prompt_panel
    ctl = loaded_window.controller
    laid_out = []

    class Layouts(QObject):
        def eventFilter(self, obj, event):  # noqa: N802 (Qt override)
            if event.type() == QEvent.Type.LayoutRequest:
                laid_out.append(obj)
            return False

    counter = Layouts()
    panel.installEventFilter(counter)
    flushes = []
    ctl.sig_steps_changed.connect(lambda: flushes.append(panel.step_label.text()))
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run(PROMPT, True, GREEDY, 12)
    qtbot.wait(100)
    assert len(set(flushes)) >= 3  # the label changed while the run streamed
    assert laid_out == []
