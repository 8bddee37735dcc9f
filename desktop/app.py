"""Start the Qt application: the window first, the model afterwards on the worker thread.

``--selftest`` loads the model, runs a few tokens, checks that every pane received data,
optionally writes a screenshot, and exits 0 (or 1 with the reason on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def _prepare_environment() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if (
        sys.platform.startswith("linux")
        and not os.environ.get("DISPLAY")
        and not os.environ.get("WAYLAND_DISPLAY")
    ):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def apply_theme(app: Any) -> None:
    """Fusion style with the system's light or dark scheme (followed when it changes)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication

    app.setStyle("Fusion")
    hints = QGuiApplication.styleHints()

    def follow(scheme: Any) -> None:
        app.setPalette(app.style().standardPalette())
        if scheme == Qt.ColorScheme.Dark:
            from llm_lens.desktop.theme import dark_palette

            app.setPalette(dark_palette())

    follow(hints.colorScheme())
    hints.colorSchemeChanged.connect(follow)


def set_icon(app: Any) -> None:
    """The app's icon from resources/icons (every size the desktop may ask for)."""
    from PySide6.QtGui import QIcon

    from llm_lens.desktop.resources import resource_dir

    folder = resource_dir()
    icon = QIcon()
    for png in sorted((folder / "icons").glob("llm-lens-*.png")):
        icon.addFile(str(png))
    if not icon.isNull():
        app.setWindowIcon(icon)


def parse_size(text: str) -> tuple[int, int]:
    """'1366x768' → (1366, 768); anything else is a usage error (one line, exit 2)."""
    width, _, height = text.lower().partition("x")
    try:
        size = int(width), int(height)
    except ValueError:
        size = (0, 0)
    if min(size) <= 0:
        raise SystemExit(f"llm-lens: --window-size wants WIDTHxHEIGHT, e.g. 1366x768; got {text!r}")
    return size


def run_gui(args: argparse.Namespace) -> int:
    _prepare_environment()
    from llm_lens.desktop.qt_libs import check

    problem = check()
    if problem:  # Qt itself would abort with a core dump and no hint of the package
        print(problem, file=sys.stderr)
        return 1
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("LLM Lens")
    app.setOrganizationName("llm-lens")
    app.setDesktopFileName("llm-lens")  # lets Wayland match the window to its menu entry
    set_icon(app)
    apply_theme(app)
    from llm_lens.desktop.main_window import MainWindow

    window = MainWindow(model_spec=args.model, device=args.device, dtype=args.dtype)
    if args.prompt:
        window.prompt_panel.editor.setPlainText(args.prompt)
    size = parse_size(args.window_size) if args.window_size else None
    if size is not None:
        window.resize_to(*size)
    window.show()
    if args.selftest:
        from llm_lens.desktop.selftest import SelfTest

        window.sessions.confirm_close = False
        test = SelfTest(window, args.tokens, args.screenshot, size)
        window.load(args.model)
        app.exec()
        return test.exit_code
    crashed = window.sessions.start()
    window.load(args.model)
    if args.session:
        window.sessions.open(args.session)
    elif crashed:
        window.offer_recovery(crashed)
    return int(app.exec())
