"""Start the Qt application: the window first, the model afterwards on the worker thread.

``--selftest`` loads the model, runs a few tokens, checks that every pane received data,
optionally writes a screenshot, and exits 0 (or 1 with the reason on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, cast


def _prepare_environment() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if (
        sys.platform.startswith("linux")
        and not os.environ.get("DISPLAY")
        and not os.environ.get("WAYLAND_DISPLAY")
    ):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


# 1 ms, not Python's 5 ms: with the streaming budget the model thread's GIL wait per decode step
# was 0-4 ms at 1 ms against 6-8 ms at 5 ms (docs/performance-history.md, "Second pass")
SWITCH_INTERVAL_S = 0.001


def tune_process(switch_interval: float | None = None) -> None:
    """Process settings for a window beside a model thread.

    ``sys.setswitchinterval``: how long a thread may hold the GIL while another waits for it.
    The GUI thread paints in Python (pyqtgraph) and the model thread needs the GIL between the
    modules of every layer; ``LLM_LENS_SWITCH_INTERVAL`` (seconds) overrides the default.
    """
    env = os.environ.get("LLM_LENS_SWITCH_INTERVAL", "")
    try:
        value = float(env) if env else switch_interval or SWITCH_INTERVAL_S
    except ValueError:
        value = switch_interval or SWITCH_INTERVAL_S
    if value > 0:
        sys.setswitchinterval(value)


def apply_theme(app: Any) -> None:
    """Fusion style with the system's light or dark scheme (followed when it changes)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication

    app.setStyle("Fusion")
    hints = QGuiApplication.styleHints()

    def follow(scheme: Any) -> None:
        app.setPalette(app.style().standardPalette())
        if scheme == Qt.ColorScheme.Dark:
            from llm_lens.desktop.widgets.theme import dark_palette

            app.setPalette(dark_palette())

    follow(hints.colorScheme())
    hints.colorSchemeChanged.connect(follow)


def set_icon(app: Any) -> None:
    """The app's icon from resources/icons (every size the desktop may ask for)."""
    from PySide6.QtGui import QIcon

    from llm_lens.desktop.widgets.resources import resource_dir

    folder = resource_dir()
    icon = QIcon()
    for png in sorted((folder / "icons").glob("llm-lens-*.png")):
        icon.addFile(str(png))
    if not icon.isNull():
        app.setWindowIcon(icon)


def run_gui(args: argparse.Namespace) -> int:
    """Open the window; whatever fails, one line (and a log) and the model thread is stopped."""
    _prepare_environment()
    tune_process()
    from llm_lens.desktop.startup.qt_libs import check

    problem = check()
    if problem:  # Qt itself would abort with a core dump and no hint of the package
        print(problem, file=sys.stderr)
        return 1
    from PySide6.QtWidgets import QApplication

    from llm_lens.core.crashlog import report_crash

    app = cast(QApplication, QApplication.instance() or QApplication(sys.argv[:1]))
    window: Any = None
    try:
        window = _make_window(app, args)
        install_excepthook(window)
        return _exec(app, window, args)
    except Exception as exc:
        print(f"llm-lens: {report_crash('running the window', exc)}", file=sys.stderr)
        return 2
    finally:
        if window is not None:
            window.controller.shutdown()  # never "QThread destroyed while running" (signal 6)
        sys.excepthook = sys.__excepthook__


def _make_window(app: Any, args: argparse.Namespace) -> Any:
    app.setApplicationName("LLM Lens")
    app.setOrganizationName("llm-lens")
    app.setDesktopFileName("llm-lens")  # lets Wayland match the window to its menu entry
    set_icon(app)
    apply_theme(app)
    from llm_lens.core.cli.args import placement
    from llm_lens.desktop.window.main_window import MainWindow

    place = placement(args)  # --device-map, --max-memory, --quantize (checked by the parser)
    window = MainWindow(
        model_spec=args.model, device=args.device, dtype=args.dtype,
        placement=place if place.split or place.quantize else None,
        allow_partly_random=bool(getattr(args, "allow_partly_random", False)),
    )  # fmt: skip
    if args.prompt:
        window.prompt_panel.editor.setPlainText(args.prompt)
    if args.window_size:
        window.resize_to(*args.window_size)  # checked by the parser
    return window


def _exec(app: Any, window: Any, args: argparse.Namespace) -> int:
    window.show()
    if args.selftest:
        from llm_lens.desktop.startup.selftest import SelfTest

        window.sessions.confirm_close = False
        test = SelfTest(
            window, args.tokens, args.screenshot, args.window_size, args.session,
            getattr(args, "screenshots", None),
        )  # fmt: skip
        if test.start(args.model):
            app.exec()
        return test.exit_code
    crashed = window.sessions.start()
    window.load(args.model)
    if args.session:
        window.sessions.open(args.session)
    elif crashed:
        window.offer_recovery(crashed)
    return int(app.exec())


def install_excepthook(window: Any) -> None:
    """A bug in a slot on the GUI thread: one line in the window and on stderr, the traceback
    in a log file; the window stays usable."""
    from llm_lens.core.crashlog import report_crash

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, exc, tb)
            return
        line = report_crash("handling a window event", exc.with_traceback(tb))
        print(f"llm-lens: {line}", file=sys.stderr)
        try:
            window.prompt_panel.show_error(line)
        except RuntimeError:  # the window is already gone
            pass

    sys.excepthook = hook
