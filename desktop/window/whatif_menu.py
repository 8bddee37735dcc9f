"""What if? in the window: a right-click on a head, a layer, an expert or a token offers the
changes its pane names (``Pane.context_targets``) and adds the one chosen to the What-if list;
"Run with these" runs the prompt again; the status bar marks an intervened run.

One :class:`WhatIfMenus` serves every pane: it watches the right button on each target's view
(before pyqtgraph's own menu), asks the pane what to offer there, and shows a menu.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QObject, QPoint, QPointF
from PySide6.QtGui import QAction, QMouseEvent
from PySide6.QtWidgets import QLabel, QMenu, QWidget

from llm_lens.desktop.state.whatif import describe, mark_text
from llm_lens.desktop.widgets.pane import ContextTarget
from llm_lens.desktop.widgets.residual_dialog import DialogChange

MARK_STYLE = "QLabel { background: #5a2d82; color: white; padding: 0 4px; }"


class WhatIfMenus(QObject):
    """Right-click menus of What-if changes over every pane's targets, and the status mark."""

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window = window
        self.whatif = window.controller.whatif
        self._targets: dict[QObject, list[ContextTarget]] = {}
        self.menu: QMenu | None = None  # the last menu shown (tests trigger its actions)
        for pane in window.panes.values():
            for target in pane.context_targets():
                watched = _watched(target)
                if watched is None:  # a plot in no scene yet: nothing to click
                    continue
                self._targets.setdefault(watched, []).append(target)
                watched.installEventFilter(self)
        self.mark = QLabel(visible=False)
        self.mark.setStyleSheet(MARK_STYLE)
        self.mark.setToolTip("The run shown was made with these changes (What if? pane)")
        window.statusBar().addPermanentWidget(self.mark)
        ctl = window.controller
        ctl.sig_run_started.connect(lambda _p: self.show_mark())
        ctl.sig_session_changed.connect(self.show_mark)
        self.whatif.sig_run_requested.connect(window.prompt_panel.run)

    def show_mark(self) -> None:
        """'intervened: head 7.4 = 0, …' in the status bar while such a run is shown."""
        text = mark_text(self.window.controller.interventions)
        self.mark.setText(text if len(text) <= 90 else text[:89] + "…")
        self.mark.setToolTip(text)
        self.mark.setVisible(bool(text))

    def changes_at(self, watched: QObject, pos: QPointF) -> list[Any]:
        """What the target under ``pos`` (in ``watched``'s pixels) offers ([]: nothing)."""
        for target in self._targets.get(watched, []):
            plot = target.plot
            if isinstance(plot, QWidget):
                return target.changes_of(pos.x(), pos.y())
            scene = plot.scene()
            if scene is None or not scene.views():
                continue
            view = scene.views()[0]
            scene_pos = view.mapToScene(pos.toPoint())
            box = plot.getViewBox()
            if box.sceneBoundingRect().contains(scene_pos):
                p = box.mapSceneToView(scene_pos)
                return target.changes_of(p.x(), p.y())
        return []

    def menu_for(self, changes: list[Any]) -> QMenu:
        """A menu with one action per change, each adding it to the What-if list."""
        menu = QMenu(self.window)
        menu.setToolTipsVisible(True)
        title = menu.addAction("What if…")
        title.setEnabled(False)
        for item in changes:
            if isinstance(item, DialogChange):  # asks for more first (a residual cell's patch)
                action = QAction(item.label, menu)
                action.triggered.connect(lambda _c=False, i=item: i.open())
                menu.addAction(action)
                continue
            action = QAction(describe(item), menu)
            action.triggered.connect(lambda _c=False, i=item: self.whatif.add(i))
            menu.addAction(action)
        menu.addSeparator()  # which places matter at all: the sweep maps every one
        menu.addAction("Patching sweep…", self.window.controller.sweep.request_open)
        self.menu = menu
        return menu

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        kind = event.type()
        if kind not in (QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonRelease):
            return False
        mouse = event if isinstance(event, QMouseEvent) else None
        if mouse is None or mouse.button() != _right():
            return False
        changes = self.changes_at(watched, mouse.position())
        if not changes:
            return False
        if kind == QEvent.Type.MouseButtonPress:
            where: QPoint = mouse.globalPosition().toPoint()
            self.menu_for(changes).popup(where)
        return True  # pyqtgraph's own menu and click handling do not see it


def _right() -> Any:
    from PySide6.QtCore import Qt

    return Qt.MouseButton.RightButton


def _watched(target: ContextTarget) -> QObject | None:
    """The widget whose mouse events carry a right-click on ``target`` (None: none yet)."""
    if isinstance(target.plot, QWidget):
        return target.plot
    scene = target.plot.scene()
    if scene is None or not scene.views():
        return None
    viewport: QObject = scene.views()[0].viewport()
    return viewport
