"""Session files in the window: open/save, recent files, drag-and-drop, autosave and crash
recovery, unsaved-changes prompt, and exports of the shown run (JSON trace, HTML report).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox, QProgressDialog

SUFFIX = ".llmlens"
FILTER = "LLM Lens session (*.llmlens)"
MAX_RECENT = 8


def _lock_path() -> Path:
    from llm_lens.core.loading import cache_root

    return cache_root() / "session.lock"


class SessionActions(QObject):
    """Owns the File-menu actions about sessions; the window forwards drops and close to it."""

    def __init__(self, window: Any, settings: Any) -> None:
        super().__init__(window)
        self.window = window
        self.controller = window.controller
        self.settings = settings
        self.confirm_close = True
        self.recent_menu = QMenu("Open &recent")
        c = self.controller
        c.sig_saved.connect(self._on_saved)
        c.sig_error.connect(lambda _m: self._end_progress())
        c.sessions.sig_save_progress.connect(self._on_progress)
        c.sessions.sig_save_estimate.connect(self._on_estimate)
        self.progress: QProgressDialog | None = None
        c.sig_run_finished.connect(lambda _s: c.sessions.request_autosave())
        c.sig_session_changed.connect(self._update_title)
        c.sig_model_loaded.connect(lambda _i: self._update_title())  # no "recorded" left over
        self._refresh_recent()

    # ----------------------------------------------------------------- menu
    def add_to(self, menu: QMenu) -> None:
        w = self.window
        menu.addAction(w._action("&Open session…", self.open_dialog, QKeySequence.StandardKey.Open))
        menu.addMenu(self.recent_menu)
        menu.addAction(w._action("&Save session", self.save, QKeySequence.StandardKey.Save))
        menu.addAction(w._action("Save session &as…", self.save_as, "Ctrl+Shift+S"))
        menu.addSeparator()
        menu.addAction(w._action("Export run as JSON &trace…", self.export_trace))
        menu.addAction(w._action("Export run as HTML &report…", self.export_report))

    def _refresh_recent(self) -> None:
        self.recent_menu.clear()
        for path in self.recent():
            action = QAction(path, self.recent_menu)
            action.triggered.connect(lambda _=False, p=path: self.open(p))
            self.recent_menu.addAction(action)
        self.recent_menu.setEnabled(bool(self.recent()))

    def recent(self) -> list[str]:
        value = self.settings.value("recentSessions", [])
        items = [value] if isinstance(value, str) else list(value or [])
        return [p for p in items if isinstance(p, str)]

    def _remember(self, path: str) -> None:
        items = [path] + [p for p in self.recent() if p != path]
        self.settings.setValue("recentSessions", items[:MAX_RECENT])
        self._refresh_recent()

    # ----------------------------------------------------------------- open / save
    def open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.window, "Open session", "", FILTER)
        if path:
            self.open(path)

    def open(self, path: str) -> None:
        """Open a session file; unsaved runs of this window are offered a save first."""
        if not self._may_replace(f"Save the runs of this window before opening {path}?"):
            return
        self.window.statusBar().showMessage(f"opening {path}…")
        self.controller.sessions.request_open(path)
        if os.path.isfile(path):
            self._remember(os.path.abspath(path))

    def save(self) -> None:
        path = self.controller.session_path
        if path and self.controller.recorded is None and not self.controller.dirty:
            return
        self.save_as(path)

    def save_as(self, path: str | None = None) -> None:
        if not self.controller.steps and self.controller.compare.saved_comparison() is None:
            self.window.prompt_panel.show_error("nothing to save yet: run a prompt first")
            return
        if not path:
            path, _ = QFileDialog.getSaveFileName(self.window, "Save session", "run.llmlens",
                                                  FILTER)  # fmt: skip
        if path:
            path = path if path.endswith(SUFFIX) else path + SUFFIX
            self.window.statusBar().showMessage(f"saving {path}…")
            self._start_progress(path)
            self.controller.sessions.request_save(path)

    def _start_progress(self, path: str) -> None:
        """A progress bar with Cancel while the model thread records the views and writes."""
        self._end_progress()
        label = f"Saving {Path(path).name}\nsize: estimated once the runs are gathered\n"
        label += "recording the views (lens, prompt maps) with the model…"
        dialog = QProgressDialog(label, "Cancel", 0, 1000, self.window)
        dialog.setWindowTitle("Save session")
        dialog.setProperty("path", path)
        dialog.setMinimumDuration(0)
        dialog.setAutoClose(False)
        dialog.setAutoReset(False)
        dialog.setValue(0)
        dialog.canceled.connect(self.controller.sessions.cancel_save)
        dialog.show()
        self.progress = dialog

    def _on_progress(self, path: str, done: int, total: int) -> None:
        dialog = self.progress
        if dialog is not None and total and dialog.property("path") == path:
            dialog.setValue(int(1000 * done / total))
            head = dialog.labelText().split("\n")[:2]
            dialog.setLabelText("\n".join([*head, f"writing: {100 * done / total:.0f} %"]))

    def _on_estimate(self, path: str, sizes: dict[str, int]) -> None:
        dialog = self.progress
        if dialog is not None and dialog.property("path") == path:
            lines = dialog.labelText().split("\n")
            dialog.setLabelText("\n".join([lines[0], self.size_line(sizes), "writing…"]))

    def _end_progress(self) -> None:
        if self.progress is not None:
            self.progress.canceled.disconnect()
            self.progress.close()
            self.progress.deleteLater()
            self.progress = None

    @staticmethod
    def size_line(sizes: dict[str, int]) -> str:
        """``estimate_size``'s answer in words (the one estimate: the writer's own plan)."""
        mb = {k: f"{v / 1e6:.1f}" if v >= 1e6 else f"{v / 1e6:.2f}" for k, v in sizes.items()}
        return (
            f"≈ {mb['total']} MB: logits {mb['logits']}, attention {mb['attention']}, "
            f"hidden states {mb['hidden']}, other {mb['other']}"
        )

    def _on_saved(self, path: str, size: int) -> None:
        if Path(path).name == "autosave.llmlens":
            return
        self._end_progress()
        self._remember(os.path.abspath(path))
        self.window.statusBar().showMessage(f"saved {path} ({size / 2**20:.1f} MiB)", 8000)
        self._update_title()

    def _update_title(self) -> None:
        c = self.controller
        name = Path(c.session_path).name if c.session_path else None
        mark = " (recorded)" if c.recorded is not None else ""
        self.window.setWindowTitle(f"LLM Lens — {name}{mark}" if name else "LLM Lens")
        self.window.recorded_label.setVisible(c.recorded is not None)

    # ----------------------------------------------------------------- exports
    def export_trace(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.window, "Export JSON trace", "trace.json",
                                              "JSON (*.json)")  # fmt: skip
        if path:
            self.controller.sessions.request_export("trace", path)

    def export_report(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.window, "Export HTML report", "report.html",
                                              "HTML (*.html)")  # fmt: skip
        if path:
            self.controller.sessions.request_export("report", path)

    # ----------------------------------------------------------------- close, crash recovery
    def may_close(self) -> bool:
        """Ask about unsaved runs; False cancels the close."""
        return self._may_replace("Save the runs of this window as a session before closing?")

    def may_switch_model(self, name: str) -> bool:
        """Ask about unsaved runs before another model replaces them; False: stay."""
        return self._may_replace(f"Save the runs of this window before opening {name}?")

    def _may_replace(self, question: str) -> bool:
        """Ask about unsaved runs before they go; False: stay (cancelled, or saving first)."""
        if not (self.confirm_close and self.controller.dirty):
            return True
        buttons = QMessageBox.StandardButton
        answer = QMessageBox.question(
            self.window, "Unsaved runs", question,
            buttons.Save | buttons.Discard | buttons.Cancel, buttons.Save,
        )  # fmt: skip
        if answer == buttons.Cancel:
            return False
        if answer == buttons.Save:
            self.save_as()
            return False  # the user goes on after the save; it is asynchronous
        return True

    def start(self) -> str | None:
        """Mark this process as running; return the autosave path if the last one crashed.

        The lock names the process that holds it. An autosave is offered only when that
        process is gone without clearing its lock (it crashed); another LLM Lens still running
        beside this one, sharing the cache folder, keeps its lock and its autosave."""
        lock = _lock_path()
        autosave = lock.parent / "autosave.llmlens"
        holder = lock_holder(lock)
        if holder is not None and holder != os.getpid() and process_alive(holder):
            return None  # another live window's lock: not ours to take nor to recover
        crashed = holder is not None and autosave.exists()
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(str(os.getpid()))
        return str(autosave) if crashed else None

    def stop(self) -> None:
        """A clean exit: forget the lock and the autosave, if the lock is this process's."""
        lock = _lock_path()
        if lock_holder(lock) not in (None, os.getpid()):
            return
        for path in (lock, lock.parent / "autosave.llmlens"):
            path.unlink(missing_ok=True)


def lock_holder(lock: Path) -> int | None:
    """The process id a lock file names (None: no lock; 0: a lock without a readable id)."""
    try:
        text = lock.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else 0


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs now (signal 0 asks without sending anything; on Windows,
    where ``os.kill`` would end the process, a lock's holder counts as alive)."""
    if pid <= 0:
        return False
    if os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    except OSError:
        return False
    return True


def is_session_url(urls: list[Any]) -> str | None:
    """The first local ``.llmlens`` path among dropped URLs."""
    for url in urls:
        path = url.toLocalFile()
        if path.endswith(SUFFIX):
            return str(path)
    return None
