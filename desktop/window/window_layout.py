"""Where the panes sit: journey-ordered tab groups under a short prompt strip, and focus mode.

The prompt, the response and the step scrubber take a strip across the top; the panes share the
rest in tab groups that follow the article's journey, so every pane is shown or one click away:

- below 1700 px: [Tokens, Embeddings, Positions, Attention, Attention lines, Layer stack,
  Experts, What if?] | [KV cache, Logits, Sampling, Timing, Why this token?]
- from 1700 px: [Tokens, Embeddings, Positions] | [Attention, Attention lines, Layer stack,
  Experts, What if?, KV cache] | [Logits, Sampling, Timing, Why this token?]

Focus mode shows one pane alone in the window and puts every other dock back afterwards.
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QPoint, Qt
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QApplication, QDockWidget, QMainWindow, QTabWidget, QWidget

JOURNEY = (
    "Tokens",
    "Embeddings",
    "Positions",
    "Attention",
    "Attention lines",
    "Layer stack",
    "Experts",  # mixture-of-experts routing (a dense model: one line saying so)
    "What if?",  # the interventions of the next run
    "KV cache",
    "Logits",
    "Sampling",
    "Timing",
    "Why this token?",
)
NARROW_GROUPS = (JOURNEY[:8], JOURNEY[8:])
WIDE_GROUPS = (JOURNEY[:3], JOURNEY[3:9], JOURNEY[9:])
WIDE_FROM = 1700  # window width (px) from which three groups fit side by side
# the tab each group shows in a fresh layout (the first group: Tokens, where the journey starts)
NARROW_FIRST, WIDE_FIRST = (
    ("Tokens", "Logits"),
    ("Tokens", "Attention", "Logits"),
)  # the journey starts
STRIP = 0.26  # the prompt strip's share of the window's height
STRIP_MIN, STRIP_MAX = 170, 300


def default_size() -> tuple[int, int]:
    """1600 × 1000, less on a smaller screen (a window manager would cut it off), never below
    the 1280 × 720 the layout is made for (offscreen Qt reports an 800 × 800 screen)."""
    from PySide6.QtGui import QGuiApplication

    screen = QGuiApplication.primaryScreen()
    if screen is None:
        return 1600, 1000
    free = screen.availableGeometry()
    return max(1280, min(1600, free.width())), max(720, min(1000, free.height()))


def groups_for(width: int) -> tuple[tuple[str, ...], ...]:
    return WIDE_GROUPS if width >= WIDE_FROM else NARROW_GROUPS


def arrange(window: QMainWindow, docks: dict[str, QDockWidget], width: int, height: int) -> None:
    """Put ``docks`` (named by pane title) into the journey's tab groups for a window this size.

    The groups sit side by side in the bottom dock area; their height leaves the prompt strip
    ``STRIP`` of the window (the response box gets the rest of what the plots do not need).
    """
    window.setTabPosition(Qt.DockWidgetArea.AllDockWidgetAreas, QTabWidget.TabPosition.North)
    bottom = Qt.DockWidgetArea.BottomDockWidgetArea
    for dock in docks.values():  # re-adding docks in place tabs them all into one group
        window.removeDockWidget(dock)
    present = [[docks[n] for n in names if n in docks] for names in groups_for(width)]
    present = [group for group in present if group]
    firsts = [group[0] for group in present]
    for i, first in enumerate(firsts):  # side by side first: a split of a tabbed dock tabs
        first.setFloating(False)
        if i == 0:
            window.addDockWidget(bottom, first)
        else:
            window.splitDockWidget(firsts[i - 1], first, Qt.Orientation.Horizontal)
    for group in present:
        for dock in group[1:]:
            dock.setFloating(False)
            window.tabifyDockWidget(group[0], dock)
    for dock in docks.values():
        dock.setVisible(True)
    raise_first(docks, width)
    if firsts:
        share = [width // len(firsts)] * len(firsts)
        window.resizeDocks(firsts, share, Qt.Orientation.Horizontal)
        strip = max(STRIP_MIN, min(STRIP_MAX, int(height * STRIP)))
        window.resizeDocks([firsts[0]], [max(200, height - strip)], Qt.Orientation.Vertical)


def raise_first(docks: dict[str, QDockWidget], width: int) -> None:
    """Bring each group's first-shown tab to the front (again once the window is shown: the
    tab bars do not exist before)."""
    for name in WIDE_FIRST if width >= WIDE_FROM else NARROW_FIRST:
        if name in docks:
            docks[name].raise_()


def dock_at(window: QMainWindow, global_pos: QPoint) -> QDockWidget | None:
    """The window's dock under a screen point (None over the prompt strip or outside)."""
    widget: QWidget | None = QApplication.widgetAt(global_pos)
    while widget is not None and widget is not window:
        if isinstance(widget, QDockWidget) and widget.parent() is window:
            return widget
        widget = widget.parentWidget()
    return None


class FocusMode:
    """One pane alone in the window, and back (the action's key toggles it)."""

    def __init__(self, window: QMainWindow, version: int) -> None:
        self.window = window
        self.version = version
        self.saved: QByteArray | None = None
        self.focused: QDockWidget | None = None

    @property
    def active(self) -> bool:
        return self.saved is not None

    def target(self) -> QDockWidget | None:
        """The dock under the mouse pointer, else the one holding the keyboard focus."""
        dock = dock_at(self.window, QCursor.pos())
        if dock is not None and dock.isVisible():
            return dock
        widget = QApplication.focusWidget()
        while widget is not None:
            if isinstance(widget, QDockWidget) and widget.parent() is self.window:
                return widget
            widget = widget.parentWidget()
        return None

    def toggle(self, dock: QDockWidget | None = None) -> bool:
        """Focus ``dock`` (default: :meth:`target`), or leave focus mode; True if it changed."""
        if self.active:
            self.leave()
            return True
        dock = dock or self.target()
        if dock is None:
            return False
        self.saved = self.window.saveState(self.version)
        self.focused = dock
        for other in self.window.findChildren(QDockWidget):
            if other is not dock and other.parent() is self.window:
                other.hide()
        central = self.window.centralWidget()
        if central is not None:
            central.hide()
        dock.setFloating(False)
        dock.show()
        dock.raise_()
        return True

    def leave(self) -> None:
        saved, self.saved, self.focused = self.saved, None, None
        central = self.window.centralWidget()
        if central is not None:
            central.show()
        if saved is not None:
            self.window.restoreState(saved, self.version)


def one_click_away(window: QMainWindow, dock: QDockWidget) -> bool:
    """Shown, or a tab of a shown group: one click away (not closed, not off the window)."""
    if dock.isVisible():
        return True
    others = window.tabifiedDockWidgets(dock)
    return dock.toggleViewAction().isChecked() and any(o.isVisible() for o in others)
