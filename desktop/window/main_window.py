"""The main window: prompt and response in the centre, every pane in a dock around them."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QByteArray, Qt
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
)

from llm_lens.core.placement import model_placement_line
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.common import ElidedLabel
from llm_lens.desktop.window.contents import load_examples, pane_classes, settings
from llm_lens.desktop.window.load_options import (
    PlacementDialog,
    partly_random_mark,
    show_partly_random,
)
from llm_lens.desktop.window.menus import build_menus
from llm_lens.desktop.window.prompt_panel import PromptPanel
from llm_lens.desktop.window.window_layout import (
    FocusMode,
    arrange,
    default_size,
    one_click_away,
    raise_first,
)

# 2: journey-ordered tab groups under a prompt strip. A version-1 state (and its geometry, a
# window at least 2011 px wide) is not restored. 3: the Experts pane joined the layer-stack group
# (a saved state without its dock would leave it floating).
STATE_VERSION = 3


class MainWindow(QMainWindow):
    """One window for the whole journey. Requests go through :class:`Controller`."""

    def __init__(
        self,
        controller: Controller | None = None,
        model_spec: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        placement: Any = None,
        allow_partly_random: bool = False,
    ) -> None:
        super().__init__()
        self.setWindowTitle("LLM Lens")
        self.controller = controller or Controller(self)
        self.model_spec, self.device, self.dtype = model_spec, device, dtype
        self.placement, self.allow_partly_random = placement, allow_partly_random  # every load
        self.prompt_panel = PromptPanel(self.controller, load_examples(), self)
        self.setCentralWidget(self.prompt_panel)
        self.panes: dict[str, Any] = {}
        self.docks: dict[str, QDockWidget] = {}
        self._revived_note = ""  # said with the next finished run
        self.views: dict[str, Any] = {}  # the Compare menu's views, made when first opened
        self.view_docks: dict[str, QDockWidget] = {}
        from llm_lens.desktop.window.session_actions import SessionActions

        self.sessions = SessionActions(self, settings())
        self._restored = self._arranged = self._shown = False
        self._build_docks()
        from llm_lens.desktop.teaching.teach import teach

        teach(self)
        self._build_status()
        from llm_lens.desktop.window.whatif_menu import WhatIfMenus

        self.whatif_menus = WhatIfMenus(self)  # right-click → What if?, the status mark
        build_menus(self)
        self._wire()
        self._restore()
        self.setAcceptDrops(True)

    def _build_docks(self) -> None:
        self.setDockNestingEnabled(True)
        for cls in pane_classes():
            pane = cls(self.controller)
            dock = QDockWidget(pane.title, self)
            dock.setObjectName(f"dock-{pane.title}")
            dock.setWidget(pane)
            dock.visibilityChanged.connect(pane.set_in_front)  # a tab behind is still "visible"
            self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, dock)
            self.panes[pane.title] = pane
            self.docks[pane.title] = dock
        self.focus = FocusMode(self, STATE_VERSION)

    def arrange(self) -> None:
        """The journey's tab groups for the window's present size (View → Reset layout)."""
        if self.focus.active:
            self.focus.leave()
        shown = {dock: dock.isVisible() for dock in self.view_docks.values()}
        for dock in shown:  # Compare, Branches, Beam: out of the way, then back among the tabs
            self.removeDockWidget(dock)
        arrange(self, self.docks, self.width(), self.height())
        for dock, visible in shown.items():
            self.tabifyDockWidget(self.docks["Attention"], dock)
            dock.setVisible(visible)

    def _build_status(self) -> None:
        self.model_label = ElidedLabel("no model loaded", min_chars=24)
        self.model_label.setAlignment(Qt.AlignmentFlag.AlignRight)
        self.recorded_label = QLabel(" recorded ", visible=False)
        self.recorded_label.setToolTip("The run shown was opened from a session file")
        self.recorded_label.setStyleSheet("QLabel { background: #8e5b00; color: white; }")
        self.statusBar().addPermanentWidget(self.recorded_label)
        self.partly_random_label = partly_random_mark()
        self.statusBar().addPermanentWidget(self.partly_random_label)
        self.reuse_label = QLabel(visible=False)
        self.reuse_label.setToolTip("Prompt tokens read from the previous run's KV cache")
        self.statusBar().addPermanentWidget(self.reuse_label)
        self.progress = QProgressBar(maximumWidth=220, maximum=100, visible=False)
        self.statusBar().addPermanentWidget(self.progress)
        self.statusBar().addPermanentWidget(self.model_label, 1)

    def _action(self, text: str, slot: Any, shortcut: Any = None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcuts(shortcut if isinstance(shortcut, list) else [shortcut])
        action.triggered.connect(slot)
        return action

    def _wire(self) -> None:
        c = self.controller
        c.sig_model_loading.connect(self._on_loading)
        c.sig_model_loaded.connect(self._on_loaded)
        c.sig_error.connect(self._on_error)
        c.sig_run_finished.connect(self._on_finished)
        c.compare.sig_prefix_reused.connect(self._on_prefix_reused)
        c.compare.sig_revived.connect(self._on_revived)
        c.sig_run_started.connect(lambda _p: self.reuse_label.setVisible(False))
        c.sig_explain_requested.connect(lambda _i: self._raise_dock("Why this token?"))

    def _raise_dock(self, title: str) -> None:
        self.docks[title].setVisible(True)
        self.docks[title].raise_()

    # ----------------------------------------------------------------- model
    def load(self, spec: str | None) -> None:
        """Load the model ``spec`` (None: the bundled one), once unsaved runs were offered a
        save (as quitting does): the runs of the model shown go with it."""
        if not self.sessions.may_switch_model(spec or "the bundled model"):
            return
        self.model_spec = spec
        self.model_label.setText(f"loading {spec or 'the bundled model'}…")
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.controller.request_load(
            spec, self.device, self.dtype, self.placement, self.allow_partly_random
        )

    def open_with_placement(self) -> PlacementDialog:
        """File → Open model with placement…: the model, device map, caps, 8/4-bit weights and
        missing weights allowed; what is accepted holds for later loads too. Returns the
        dialog (shown, not modal: tests and screenshots drive it)."""
        dialog = PlacementDialog(self.model_spec, self.placement, self.allow_partly_random, self)

        def accepted() -> None:
            self.placement, self.allow_partly_random = (
                dialog.result_placement,
                dialog.allow_partly_random,
            )
            self.load(dialog.spec())

        dialog.accepted.connect(accepted)
        dialog.open()
        return dialog

    def _on_loading(self, fraction: float, message: str) -> None:
        self.progress.setVisible(True)
        self.progress.setValue(int(fraction * 100))
        self.statusBar().showMessage(message)

    def _on_loaded(self, info: Any) -> None:
        self.progress.setVisible(False)
        if info.architecture == "served":  # shapes a server does not report are 0: not shown
            from llm_lens.desktop.window.server_dialog import served_label

            self.model_label.setText(served_label(info))
            return
        params = f"{info.num_parameters / 1e6:.0f}M params"
        self.model_label.setText(
            f"{info.name} · {info.device} · {info.dtype} · {params} · "
            f"{info.num_layers} layers · {info.num_heads}/{info.num_kv_heads} heads (Q/KV, "
            f"{info.head_sharing}) · "
            f"context {info.context_length}"
            + (f" · {where}" if (where := model_placement_line(info)) else "")
        )
        show_partly_random(self.partly_random_label, info)
        self.statusBar().showMessage("model ready: press Ctrl+Enter to run", 5000)

    def _on_error(self, message: str) -> None:
        self.progress.setVisible(False)
        if self.controller.info is None:
            self.model_label.setText("no model loaded")
        else:
            self._on_loaded(self.controller.info)
        self.prompt_panel.show_error(message)

    def _on_finished(self, summary: Any) -> None:
        note, self._revived_note = self._revived_note, ""
        stopped = summary.extra.get("stop_error")  # a server failed mid-run
        note += f" · {stopped} ({len(summary.generated_ids)} tokens received)" if stopped else ""
        self.statusBar().showMessage(
            f"{len(summary.generated_ids)} tokens · stopped: {summary.finish_reason} · "
            f"TTFT {summary.ttft_ms:.0f} ms · {summary.tokens_per_s:.1f} tokens/s{note}"
        )

    # ----------------------------------------------------------------- compare
    def open_view(self, title: str) -> Any:
        """Show (creating it the first time) the dock of a Compare-menu view; returns the view."""
        if title not in self.views:
            from llm_lens.desktop.views.beam_view import BeamView
            from llm_lens.desktop.views.branch_view import BranchView
            from llm_lens.desktop.views.compare_view import CompareView

            panel, c = self.prompt_panel, self.controller
            source = lambda: (panel.editor.toPlainText(), panel.chat_box.isChecked())  # noqa: E731
            kinds = {"Compare": CompareView, "Beam search": BeamView}
            view = kinds[title](c, source) if title in kinds else BranchView(c)
            dock = self.view_docks[title] = QDockWidget(title, self, objectName=f"dock-{title}")
            dock.setWidget(view)
            self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, dock)
            self.tabifyDockWidget(self.docks["Attention"], dock)
            self.views[title] = view
        self.view_docks[title].setVisible(True)
        self.view_docks[title].raise_()
        return self.views[title]

    def open_compare(self) -> Any:
        return self.open_view("Compare")

    def open_branch(self) -> Any:
        view = self.open_view("Branches")
        view.refresh()
        return view

    def open_beam(self) -> Any:
        return self.open_view("Beam search")

    def _on_revived(self, diff: float, scale: float, matches: bool) -> None:
        """A recorded run was re-read on the loaded model before it went on."""
        what = "matches the recording" if matches else "DIFFERS from the recording"
        origin = self.controller.sessions.origin
        others = len(origin.kept_runs()) if origin is not None else 0
        runs = "run is" if others == 1 else "runs are"
        kept = f"; the file's other {others} {runs} saved with this session" if others else ""
        self._revived_note = (
            f" · re-read the recorded context: the model {what} "
            f"(largest logit difference {diff:.2g} of {scale:.3g}){kept}"
        )
        self.statusBar().showMessage(self._revived_note[3:])

    def _on_prefix_reused(self, tokens: int, saved_ms: float) -> None:
        self.reuse_label.setText(f"reused {tokens} tokens, TTFT saved ≈ {saved_ms:.0f} ms")
        self.reuse_label.setToolTip(
            "Prompt tokens read from the previous run's KV cache. The time saved is an estimate: "
            "the last full prefill's time scaled to this prompt's length, minus this prefill's"
        )
        self.reuse_label.setVisible(True)

    # ----------------------------------------------------------------- export
    def export_pane(self, name: str, path: str) -> None:
        """Export a pane's figure (PNG/SVG) or data (CSV) by suffix; errors become messages."""
        pane = self.panes[name]
        try:
            if path.lower().endswith(".csv"):
                pane.export_csv(path)
            else:
                pane.export_image(path)
        except (OSError, ValueError) as exc:
            self.prompt_panel.show_error(f"could not export {name}: {exc}")
            return
        self.statusBar().showMessage(f"exported {name} to {path}", 5000)

    # ----------------------------------------------------------------- state
    def _restore(self) -> None:
        s = settings()
        self.arrange()
        version = s.value("layoutVersion")
        geometry, state = s.value("geometry"), s.value("windowState")
        if str(version) != str(STATE_VERSION):  # an older layout: start from the fresh one
            geometry = state = None
        if isinstance(geometry, QByteArray) and self.restoreGeometry(geometry):
            self._restored = True
        else:
            self.resize(*default_size())
        if isinstance(state, QByteArray):
            self._restored = self.restoreState(state, STATE_VERSION)

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        if not self._restored and not self._arranged:
            self._arranged = True  # groups and shares for the size the window opened at
            self.arrange()
        if not self._restored and not self._shown:
            from PySide6.QtCore import QTimer

            QTimer.singleShot(0, lambda: raise_first(self.docks, self.width()))
        self._shown = True

    def resize_to(self, width: int, height: int) -> None:
        """``--window-size``: that size, and the journey's layout for it."""
        self.resize(width, height)
        self._arranged = True
        self.arrange()

    def toggle_focus(self, dock: QDockWidget | None = None) -> None:
        """Show the pane under the pointer alone in the window, or go back."""
        if not self.focus.toggle(dock):
            self.statusBar().showMessage("point at a pane, then press Ctrl+M to focus it", 4000)

    def hidden_panes(self) -> list[str]:
        """Panes neither shown nor one tab click away."""
        return [n for n, d in self.docks.items() if not one_click_away(self, d)]

    def open_tour(self) -> Any:
        """Help → Tour: walk the article's steps on the run shown (returns the dialog)."""
        from llm_lens.desktop.teaching.tour import TourDialog

        self.tour = TourDialog(self)
        self.tour.show()
        self.tour.start()
        return self.tour

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 (Qt name)
        from llm_lens.desktop.window.session_actions import is_session_url

        if is_session_url(event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 (Qt name)
        from llm_lens.desktop.window.session_actions import is_session_url

        path = is_session_url(event.mimeData().urls())
        if path:
            self.sessions.open(path)
            event.acceptProposedAction()

    def offer_recovery(self, autosave: str) -> None:
        """After a crash: say so, and reopen the autosaved run if the user wants it."""
        buttons = QMessageBox.StandardButton
        answer = QMessageBox.question(
            self, "Recover the last run?",
            "LLM Lens did not close cleanly last time. Reopen the run it saved automatically?",
            buttons.Yes | buttons.No, buttons.Yes,
        )  # fmt: skip
        if answer == buttons.Yes:
            self.sessions.open(autosave)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt name)
        if not self.sessions.may_close():
            event.ignore()
            return
        if self.focus.active:
            self.focus.leave()
        s = settings()
        s.setValue("layoutVersion", STATE_VERSION)
        s.setValue("geometry", self.saveGeometry())
        s.setValue("windowState", self.saveState(STATE_VERSION))
        s.sync()
        self.controller.shutdown()
        self.sessions.stop()
        super().closeEvent(event)
