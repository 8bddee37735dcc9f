"""File → Open → Model on NDIF…: a model whose internals are read by nnsight traces that run on
NDIF, or, for testing and offline use, the same serialised traces run here on a local model
(nnsight's ``remote="local"``).

The dialog asks for the model (a Hub id for NDIF; a folder, a .gguf file or nothing, the bundled
model, for the local simulation) and whether each step brings back the whole distribution. The
key is never typed here nor saved: the engine reads it from ``NDIF_API_KEY`` or the OS keyring
when it opens, and the dialog only says whether one is there. While a job waits on the server,
the status bar's NDIF line says where it stands (received, queued and its position, running,
completed, error), fed by the engine's status hook (:mod:`llm_lens.desktop.state.ndif_status`).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QWidget,
)

from llm_lens.core.engines.ndif.engine import WHOLE
from llm_lens.core.engines.ndif.live import NdifSpec
from llm_lens.core.engines.ndif.status import KEY_ENV, NO_KEY
from llm_lens.core.errors import LensError
from llm_lens.desktop.state.ndif_status import NdifStatus

BACKENDS = ("NDIF (the models it hosts)", "local (nnsight remote=local, on this machine)")
KEYS = {
    "model": "ndif/model",
    "local": "ndif/local",
    "full": "ndif/full_logits",
    "host": "ndif/host",
}
HINT = (
    "Each run is one job: tokens, each step's top-N and the rest in bins, the logit lens and "
    "each layer's residual norm, computed on the server; the attention rows of the heads you "
    "open. Whole maps, residual vectors and interventions need the model opened locally."
)
FULL = f"{WHOLE} (exact sampling stages; more bytes)"  # the Sampling note names it
PLACEHOLDER = {False: "org/name, e.g. meta-llama/Llama-3.1-8B", True: "empty: the bundled model"}


class NdifDialog(QDialog):
    """Which model, where its traces run, and how much of each step's distribution comes back."""

    _key_found = Signal(str)  # where a key was found, or the line saying there is none

    def __init__(self, settings: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open a model on NDIF")
        self.settings = settings
        self.backend = QComboBox()
        self.backend.addItems(BACKENDS)
        self.model = QLineEdit(str(settings.value(KEYS["model"], "")))
        browse = QPushButton("Folder…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.model, 1)
        row.addWidget(browse)
        self.host = QLineEdit(str(settings.value(KEYS["host"], "")))
        self.host.setPlaceholderText("empty: nnsight's configured server (api.ndif.us)")
        self.full = QCheckBox(FULL)
        self.full.setChecked(str(settings.value(KEYS["full"], "false")) == "true")
        self.key = QLabel(wordWrap=True)
        self.status = QLabel(HINT, wordWrap=True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("Runs on", self.backend)
        form.addRow("Model", row)
        form.addRow("Server", self.host)
        form.addRow("API key", self.key)
        form.addRow(self.full)
        form.addRow(self.status)
        form.addRow(buttons)
        self.setMinimumWidth(560)
        self._key_found.connect(self.key.setText, Qt.ConnectionType.QueuedConnection)
        self.backend.currentIndexChanged.connect(self._backend_changed)
        local = str(settings.value(KEYS["local"], "false")) == "true"
        self.backend.setCurrentIndex(1 if local else 0)
        self._backend_changed()

    @property
    def local(self) -> bool:
        return self.backend.currentIndex() == 1

    def spec(self) -> NdifSpec:
        """What the fields say (checked: a bad id or a missing folder is one line)."""
        host = None if self.local else self.host.text().strip().rstrip("/") or None
        spec = NdifSpec(self.model.text().strip() or None, self.local, self.full.isChecked(), host)
        spec.check()
        return spec

    def _backend_changed(self) -> None:
        self.model.setPlaceholderText(PLACEHOLDER[self.local])
        self.host.setEnabled(not self.local)
        if self.local:
            self.key.setText("not needed: the traces run on this machine")
            return
        self.key.setText("looking…")
        threading.Thread(target=self._look_for_key, name="llm-lens-ndif-key", daemon=True).start()

    def _look_for_key(self) -> None:
        """Say where the key is (the environment, else the OS keyring, which may be slow to
        answer: off the GUI thread); the key itself is never shown or kept here."""
        from llm_lens.core.engines.ndif.status import api_key

        if os.environ.get(KEY_ENV, "").strip():
            self._key_found.emit(f"from {KEY_ENV} (never saved)")
            return
        try:
            api_key()
        except LensError:
            self._key_found.emit(NO_KEY)
            return
        self._key_found.emit("from the OS keyring (never saved)")

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A Hugging Face model folder")
        if folder:
            self.backend.setCurrentIndex(1)  # a folder runs here
            self.model.setText(folder)

    def accept(self) -> None:
        try:
            spec = self.spec()
        except LensError as exc:
            self.status.setText(str(exc))
            return
        self.settings.setValue(KEYS["model"], spec.model or "")
        self.settings.setValue(KEYS["local"], "true" if spec.local else "false")
        self.settings.setValue(KEYS["full"], "true" if spec.full_logits else "false")
        if not spec.local:
            self.settings.setValue(KEYS["host"], spec.host or "")  # checked: no credentials
        super().accept()


def open_ndif_dialog(window: Any, settings: Any) -> None:
    """Ask for the model and open it on the NDIF engine as the window's model."""
    dialog = NdifDialog(settings, window)
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return
    spec = dialog.spec()
    if window.sessions.may_switch_model(spec.label):
        open_ndif(window, spec)


def open_ndif(window: Any, spec: NdifSpec) -> NdifStatusLine:
    """Open ``spec`` through the controller (as a model load), its jobs' statuses shown in the
    window's status bar; that line (made once per window)."""
    line = status_line_of(window)
    line.opening(spec)
    window.controller.request_open_server(dataclasses.replace(spec, on_status=line.status.report))
    return line


def status_line_of(window: Any) -> NdifStatusLine:
    """The window's NDIF line in its status bar, made on first use."""
    found: NdifStatusLine | None = window.findChild(NdifStatusLine)
    if found is None:
        found = NdifStatusLine(window.controller, window)
        window.statusBar().addPermanentWidget(found)
    return found


class NdifStatusLine(QLabel):
    """The status bar's NDIF line: "opening", "ready", then each job's status as the engine
    reports it (``status``, fed from the model thread); hidden once another model is loaded
    or the NDIF model failed to open (the status bar says why)."""

    def __init__(self, controller: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.status = NdifStatus(parent=self)
        self.expect_load = False  # an NDIF model is opening: the next load is its
        self.status.sig_status.connect(lambda _s, line: self.setText(line))
        controller.sig_model_loaded.connect(self._loaded)
        controller.sig_error.connect(self._failed)
        controller.sig_run_finished.connect(self._finished)
        self.setContentsMargins(12, 0, 4, 0)  # apart from the model's line beside it
        self.setVisible(False)

    def opening(self, spec: NdifSpec) -> None:
        self.status.where = spec.base_url
        self.setText(f"{spec.base_url}: opening {spec.label}…")
        self.expect_load = True
        self.setVisible(True)

    def _loaded(self, info: Any) -> None:
        if self.expect_load:
            self.expect_load = False
            self.setText(f"{self.status.where}: {info.name} ready")
        else:  # another model took the window's place
            self.setVisible(False)

    def _finished(self, summary: Any) -> None:
        if self.isVisible() and self.status.seen and self.status.seen[-1] == "COMPLETED":
            steps = len(summary.generated_ids)
            self.setText(f"{self.status.where}: last job completed, its {steps} steps shown")

    def _failed(self, _message: str) -> None:
        if self.expect_load:  # it did not open: the status bar's line says why
            self.expect_load = False
            self.setVisible(False)
