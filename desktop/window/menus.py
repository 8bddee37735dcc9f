"""The main window's menu bar and what its File entries ask before they act.

Kept apart from :mod:`main_window` so that the window holds its docks, status bar and state,
and this module holds which command sits under which menu, with which shortcut, and the
small file and text dialogs that open a model or export a pane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from llm_lens.desktop.window.contents import settings

if TYPE_CHECKING:
    from llm_lens.desktop.window.main_window import MainWindow


def build_menus(w: MainWindow) -> None:
    """File, Run, Compare, View and Help, each entry wired to the window or its controller."""
    bar = w.menuBar()
    file_menu = bar.addMenu("&File")
    w.sessions.add_to(file_menu)
    file_menu.addSeparator()
    file_menu.addAction(w._action("Open model &folder…", lambda: open_folder(w), "Ctrl+Shift+O"))
    file_menu.addAction(w._action("Open &GGUF file…", lambda: open_gguf(w)))
    file_menu.addAction(w._action("Open &hub model id…", lambda: open_hub(w)))
    file_menu.addAction(w._action("Load the &bundled model", lambda: w.load(None)))
    file_menu.addAction(w._action("Open model with &placement…", w.open_with_placement))
    file_menu.addAction(w._action("Open &server…", lambda: open_server(w)))  # server_dialog
    file_menu.addAction(w._action("Model on &NDIF…", lambda: open_ndif(w)))  # ndif_dialog
    file_menu.addSeparator()
    file_menu.addAction(w._action("&Export pane…", lambda: export_pane_dialog(w), "Ctrl+E"))
    file_menu.addSeparator()
    file_menu.addAction(w._action("&Quit", w.close, QKeySequence.StandardKey.Quit))
    _build_run_menu(w)
    compare = bar.addMenu("&Compare")
    compare.addAction(w._action("&Compare samplers…", w.open_compare, "Ctrl+Shift+C"))
    compare.addAction(w._action("&Branch from this step…", w.open_branch, "Ctrl+B"))
    compare.addAction(w._action("Beam &search…", w.open_beam, "Ctrl+Shift+B"))
    compare.addAction(w._action("&Patching sweep…", lambda: open_sweep(w)))
    w.controller.sweep.sig_open_requested.connect(lambda: open_sweep(w))  # What if?'s button
    view = bar.addMenu("&View")
    for dock in w.docks.values():
        view.addAction(dock.toggleViewAction())
    view.addSeparator()
    view.addAction(w._action("Runs of this session (history, branches)…", w.open_branch))
    view.addAction(
        w._action("&Focus the pane under the pointer (and back)", w.toggle_focus,
                  ["Ctrl+M", "F11"])
    )  # fmt: skip
    view.addAction(w._action("&Reset layout", w.arrange))
    help_menu = bar.addMenu("&Help")
    help_menu.addAction(w._action("&Tour: one prompt, step by step", w.open_tour, "F1"))
    help_menu.addAction(w._action("&About LLM Lens", lambda: about(w)))


def _build_run_menu(w: MainWindow) -> None:
    """Run, Continue, Stop and the step scrubber's keys."""
    run_menu = w.menuBar().addMenu("&Run")
    panel = w.prompt_panel
    run_menu.addAction(w._action("&Run", panel.run, ["Ctrl+Return", "Ctrl+Enter"]))
    run_menu.addAction(
        w._action("&Continue", panel.continue_run, ["Ctrl+Shift+Return", "Ctrl+Shift+Enter"])
    )
    run_menu.addAction(w._action("&Stop", w.controller.request_stop, "Esc"))
    run_menu.addAction(w._action("&Previous step", lambda: panel.step_by(-1), "Alt+Left"))
    run_menu.addAction(w._action("&Next step", lambda: panel.step_by(1), "Alt+Right"))
    run_menu.addAction(w._action("&First step (prefill)", lambda: panel.step_to(0), "Alt+Home"))
    run_menu.addAction(w._action("&Last step", lambda: panel.step_to(-1), "Alt+End"))


def open_sweep(w: MainWindow) -> None:
    """Compare → Patching sweep…: the causal tracing map (:mod:`.sweep_dialog`)."""
    from llm_lens.desktop.window.sweep_dialog import open_sweep_dialog

    open_sweep_dialog(w)


# ----------------------------------------------------------------- open a model
def open_server(w: MainWindow) -> None:
    """File → Open server…"""
    from llm_lens.desktop.window.server_dialog import open_server_dialog

    open_server_dialog(w, settings())


def open_ndif(w: MainWindow) -> None:
    """File → Model on NDIF…"""
    from llm_lens.desktop.window.ndif_dialog import open_ndif_dialog

    open_ndif_dialog(w, settings())


def open_folder(w: MainWindow) -> None:
    """File → Open model folder…: a Hugging Face model folder."""
    folder = QFileDialog.getExistingDirectory(w, "Open a Hugging Face model folder")
    if folder:
        w.load(folder)


def open_gguf(w: MainWindow) -> None:
    """File → Open GGUF file…"""
    path, _ = QFileDialog.getOpenFileName(w, "Open a GGUF model", "", "GGUF (*.gguf)")
    if path:
        w.load(path)


def open_hub(w: MainWindow) -> None:
    """File → Open hub model id…: an id typed as org/name."""
    text, ok = QInputDialog.getText(w, "Open hub model", "Model id (e.g. org/name):")
    if ok and text.strip():
        w.load(text.strip())


# ----------------------------------------------------------------- export, about
def export_pane_dialog(w: MainWindow) -> None:
    """File → Export pane…: which pane, then where; the suffix picks PNG, SVG or CSV."""
    names = list(w.panes)
    name, ok = QInputDialog.getItem(w, "Export pane", "Pane:", names, 0, False)
    if not ok:
        return
    path, _ = QFileDialog.getSaveFileName(
        w,
        f"Export {name}",
        f"{name.lower().replace(' ', '-')}.png",
        "PNG image (*.png);;SVG image (*.svg);;CSV data (*.csv)",
    )
    if path:
        w.export_pane(name, path)


def about(w: MainWindow) -> None:
    """Help → About: the version of every library the numbers came from."""
    import platform

    from PySide6 import __version__ as pyside_version

    versions = [f"Python {platform.python_version()}", f"PySide6 {pyside_version}"]
    for mod in ("torch", "transformers", "pyqtgraph", "tiktoken", "numpy"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            versions.append(f"{mod} missing")
    QMessageBox.about(
        w,
        "About LLM Lens",
        "<b>LLM Lens</b> 0.1.0<br>Every number shown is "
        "what the loaded model computed.<br><br>" + "<br>".join(versions),
    )
