"""Qt fixtures: a controller with the bundled model loaded, one with none (`bare`), the window,
and a controller with a finished run."""

from __future__ import annotations

import pytest


@pytest.fixture
def controller(qtbot):
    """A Controller whose worker thread has loaded the bundled model; stopped afterwards."""
    from llm_lens.desktop.state.controller import Controller

    ctl = Controller()
    with qtbot.waitSignal(ctl.sig_model_loaded, timeout=120_000):
        ctl.request_load()
    yield ctl
    ctl.shutdown()


@pytest.fixture
def bare(qtbot):
    """A controller with no model loaded (its worker thread stopped afterwards)."""
    from llm_lens.desktop.state.controller import Controller

    ctl = Controller()
    yield ctl
    ctl.shutdown()


def open_window(qtbot, tmp_path, monkeypatch, model: str | None = None):
    """The main window, shown, once ``model`` (a folder; None: the bundled model) has loaded;
    its settings in tmp_path. The caller closes it."""
    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path))
    from llm_lens.desktop.window.main_window import MainWindow

    win = MainWindow()
    win.sessions.confirm_close = False
    qtbot.addWidget(win)
    win.show()
    with qtbot.waitSignal(win.controller.sig_model_loaded, timeout=120_000):
        win.load(model)
    return win


@pytest.fixture
def bare_window(qtbot, tmp_path, monkeypatch):
    """The main window, shown, with no model loaded; its settings in tmp_path."""
    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path))
    from llm_lens.desktop.window.main_window import MainWindow

    win = MainWindow()
    win.sessions.confirm_close = False
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()


@pytest.fixture
def loaded_window(qtbot, tmp_path, monkeypatch):
    """The main window, shown, with the bundled model loaded; its settings in tmp_path."""
    win = open_window(qtbot, tmp_path, monkeypatch)
    yield win
    win.close()


@pytest.fixture
def ran(qtbot, controller):
    """The controller after a finished greedy run of 6 tokens on the article's prompt."""
    from llm_lens.core.sampling import GREEDY

    with qtbot.waitSignal(controller.sig_run_finished, timeout=120_000):
        controller.request_run("Explain transformers like I am 12", True, GREEDY, 6)
    qtbot.wait(50)
    return controller


def wait_result(qtbot, controller, kind, **args):
    """Ask for an analysis and wait until it is cached; returns it."""
    result = controller.request_analysis(kind, **args)
    if result is None:
        qtbot.waitUntil(
            lambda: controller.request_analysis(kind, **args) is not None, timeout=60_000
        )
        result = controller.request_analysis(kind, **args)
    return result
