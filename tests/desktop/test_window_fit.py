"""The window at laptop sizes, focus mode, stored layouts, and pictures that match the step."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtGui import QFontMetrics
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


def test_a_stored_old_layout_does_not_bring_back_a_2011_px_window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path))
    from llm_lens.desktop.window.main_window import MainWindow, settings
    from llm_lens.desktop.window.window_layout import default_size

    old = MainWindow()
    qtbot.addWidget(old)
    old.setMinimumWidth(2011)  # what the version-1 layout forced
    old.resize(2011, 768)
    geometry, state = old.saveGeometry(), old.saveState(1)
    old.setMinimumWidth(0)
    old.controller.shutdown()
    s = settings()
    s.setValue("geometry", geometry)
    s.setValue("windowState", state)  # as version 1 wrote them: no layoutVersion
    s.sync()
    assert isinstance(QSettings(str(tmp_path / "llm-lens.ini"), QSettings.Format.IniFormat)
                      .value("geometry"), QByteArray)  # fmt: skip
    win = MainWindow()
    qtbot.addWidget(win)
    assert (win.width(), win.height()) == default_size()
    assert win.width() < 2011
    win.controller.shutdown()


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


@pytest.mark.slow
def test_attention_map_at_step_0_after_a_run_frames_the_prompt(qtbot, ran):
    from llm_lens.desktop.panes.attention import AttentionPane
    from tests.desktop.conftest import wait_result

    pane = AttentionPane(ran)
    qtbot.addWidget(pane)
    pane.resize(640, 480)
    pane.show()
    wait_result(qtbot, ran, "attention_map", layer=0, head=0, max_size=256)
    n, last = len(ran.prompt), ran.steps[-1].index
    ran.request_select(last)
    pane.render(ran.steps[last])
    ran.request_select(0)
    pane.render(ran.steps[0])
    _settle(qtbot)
    vb = pane.map_plot.getViewBox()
    (x0, x1), (y0, y1) = vb.viewRange()
    assert (x0, x1, y0, y1) == pytest.approx((0, n, 0, n))
    vb.autoRange()  # what pyqtgraph's "A" button does
    (x0, x1), (y0, y1) = vb.viewRange()
    assert 0 <= x0 and x1 <= n and 0 <= y0 and y1 <= n and x1 - x0 > 0.9 * n
    metrics = QFontMetrics(pane.font())
    widest = max(metrics.horizontalAdvance(t) for t in pane.labels)
    for side, pixels, need in (
        ("left", vb.height(), metrics.height()),
        ("bottom", vb.width(), widest),
    ):
        ticks = [pos for pos, _ in pane.map_plot.getAxis(side)._tickLevels[0]]
        assert len(ticks) >= 2
        spacing = (ticks[1] - ticks[0]) * pixels / (x1 - x0)
        assert spacing >= need * 0.9, (side, spacing, need)


@pytest.mark.slow
def test_embeddings_layer_paths_hide_the_neighbour_list(qtbot, ran):
    from llm_lens.desktop.panes.embeddings import EmbeddingsPane
    from tests.desktop.conftest import wait_result

    pane = EmbeddingsPane(ran)
    qtbot.addWidget(pane)
    pane.show()
    token = ran.prompt.ids[-1]
    wait_result(qtbot, ran, "neighbours", token_id=token)
    pane.select_token(token)
    assert pane.neighbour_list.count() > 0 and pane.neighbour_box.isVisible()
    pane.mode.setCurrentIndex(1)
    assert not pane.neighbour_box.isVisible() and not pane.neighbour_list.isVisible()
    pane.mode.setCurrentIndex(0)
    assert pane.neighbour_box.isVisible()


def test_beam_search_last_step_shows_the_finished_beams_best_first(qtbot, loaded_window):
    from llm_lens.desktop.views.beam_view import DONE_TITLE, one_line

    win = loaded_window
    win.prompt_panel.editor.setPlainText(PROMPT)
    view = win.open_beam()
    view.beams.setValue(3)
    view.max_tokens.setValue(5)
    with qtbot.waitSignal(win.controller.compare.sig_beam_finished, timeout=120_000) as b:
        view.run_button.click()
    result = b.args[0]
    view.slider.setValue(view.slider.maximum())
    view.show_step(view.slider.maximum())
    assert view.live_title.text() == DONE_TITLE
    live = [view.live.item(r, 1).text() for r in range(view.live.rowCount())]
    scores = [view.live.item(r, 2).text() for r in range(view.live.rowCount())]
    assert live and live[0] == one_line(result.text)
    assert float(scores[0]) == pytest.approx(result.score, abs=1e-3)
    assert not any("search done" in s for s in scores)
    stopped = {
        view.candidates.item(r, 1).text()
        for r in range(view.candidates.rowCount())
        if view.candidates.item(r, 3).text() == "stopped"
    }
    assert not stopped & set(live)
    view.slider.setValue(0)  # an earlier step lists the live beams again
    assert view.live_title.text().startswith("Live beams")


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
