"""File → Open server…: a model behind an OpenAI-compatible server (vLLM, SGLang, llama.cpp's
server, LM Studio, Ollama) in place of a model loaded here.

The dialog asks for the server's API root, the model (a list filled from the server's
``/v1/models`` where it answers, asked off the GUI thread) and the *name* of the environment
variable holding the key: the key itself is never typed here nor saved in a setting.
"""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QWidget,
)

from llm_lens.core.engines.openai.live import DEFAULT_KEY_ENV, ServerSpec, served_models
from llm_lens.core.errors import LensError

DEFAULT_URL = "http://127.0.0.1:8000/v1"
LIST_TIMEOUT_S = 5.0  # the model list is a convenience: a slow server is not waited for long
KEYS = {"url": "server/base_url", "model": "server/model", "key_env": "server/key_env"}
HINT = (
    "Tokens, log-probabilities, the alternatives the server returns and the stream's timing "
    "are shown; a server reports no attention or layers (open the model locally for those)."
)


class ServerDialog(QDialog):
    """Where the server is, which model, and which environment variable holds its key."""

    _listed = Signal(object, str)  # (model ids, or None; the line saying why not)

    def __init__(self, settings: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open a model on a server")
        self.settings = settings
        self.url = QLineEdit(str(settings.value(KEYS["url"], DEFAULT_URL)))
        self.model = QComboBox(editable=True)
        self.model.setEditText(str(settings.value(KEYS["model"], "")))
        typed = self.model.lineEdit()
        if typed is not None:
            typed.setPlaceholderText("the only model it serves")
        self.key_env = QLineEdit(str(settings.value(KEYS["key_env"], DEFAULT_KEY_ENV)))
        self.key_env.setToolTip("the variable's name, not the key: the key is never saved")
        self.status = QLabel(HINT, wordWrap=True)
        refresh = QPushButton("List models")
        refresh.clicked.connect(self.list_models)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("API root", self.url)
        form.addRow("Model", self.model)
        form.addRow("", refresh)
        form.addRow("Key variable", self.key_env)
        form.addRow(self.status)
        form.addRow(buttons)
        self.setMinimumWidth(520)
        self._listed.connect(self._on_listed, Qt.ConnectionType.QueuedConnection)
        self.url.editingFinished.connect(self.list_models)

    def spec(self) -> ServerSpec:
        """What the fields say (checked: a bad URL or variable name is one line)."""
        spec = ServerSpec(
            self.url.text().strip(),
            self.model.currentText().strip() or None,
            self.key_env.text().strip(),
        )
        spec.check()
        return spec

    def list_models(self) -> None:
        """Ask the server for its models on a short-lived thread; the list fills when it
        answers (a server that does not answer leaves the model typed)."""
        try:
            spec = self.spec()
        except LensError as exc:
            self.status.setText(str(exc))
            return
        self.status.setText(f"asking {spec.base_url} for its models…")
        quick = ServerSpec(spec.base_url, spec.model, spec.key_env, LIST_TIMEOUT_S)

        def ask() -> None:
            try:
                self._listed.emit(served_models(quick), "")
            except LensError as exc:
                self._listed.emit(None, str(exc))

        threading.Thread(target=ask, name="llm-lens-models", daemon=True).start()

    def _on_listed(self, models: list[str] | None, line: str) -> None:
        if models is None:
            self.status.setText(line)
            return
        typed = self.model.currentText()
        self.model.clear()
        self.model.addItems(models)
        self.model.setEditText(typed if typed in models or not models else models[0])
        self.status.setText(f"it serves {len(models)} model(s). {HINT}")

    def accept(self) -> None:
        try:
            spec = self.spec()
        except LensError as exc:
            self.status.setText(str(exc))
            return
        self.settings.setValue(KEYS["url"], spec.base_url)
        self.settings.setValue(KEYS["model"], spec.model or "")
        self.settings.setValue(KEYS["key_env"], spec.key_env)  # the name only
        super().accept()


def open_server_dialog(window: Any, settings: Any) -> None:
    """Ask for a server and open its model as the window's (the controller's
    ``request_open_server``, as a model load)."""
    dialog = ServerDialog(settings, window)
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return
    spec = dialog.spec()
    if not window.sessions.may_switch_model(spec.model or spec.base_url):
        return
    window.controller.request_open_server(spec)


def served_label(info: Any) -> str:
    """The status bar's model line for a served model: its name, where, its context."""
    context = f"context {info.context_length}" if info.context_length else "context not reported"
    name = info.name.rstrip("/").rsplit("/", 1)[-1]  # llama.cpp's server names it by its path
    return f"{name} · served by {info.source} · {context}"
