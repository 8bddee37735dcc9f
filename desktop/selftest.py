"""``llm-lens --selftest``: the real window, the bundled model, a short run, every pane checked:
each received data, and each fits the window (no control outside it, no plot too small)."""

from __future__ import annotations

import sys
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

TIMEOUT_MS = 300_000


def missing_resources() -> str:
    """What the installed package lacks of its shipped files ('' when nothing is missing)."""
    import json

    from llm_lens.desktop.resources import resource_dir

    folder = resource_dir()
    try:
        prompts = json.loads((folder / "prompts.json").read_text(encoding="utf-8"))["prompts"]
    except (OSError, ValueError, KeyError):
        return f"no example prompts in {folder}"
    if QApplication.windowIcon().isNull():
        return f"no icon in {folder / 'icons'}"
    print(f"selftest: {len(prompts)} example prompts and the icon found in {folder}",
          file=sys.stderr)  # fmt: skip
    return ""


class SelfTest:
    """Drives the window through load → run → analyses, then checks and exits the event loop."""

    def __init__(
        self,
        window: Any,
        tokens: int,
        screenshot: str | None,
        size: tuple[int, int] | None = None,
    ) -> None:
        self.window = window
        self.size = size  # --window-size: the window must fit it
        self.tokens = tokens
        self.screenshot = screenshot
        self.exit_code = 1
        c = window.controller
        c.sig_model_loaded.connect(self._on_loaded)
        c.sig_run_finished.connect(self._on_finished)
        c.sig_error.connect(lambda m: self._fail(f"error shown in the window: {m}"))
        QTimer.singleShot(TIMEOUT_MS, lambda: self._fail("timed out"))

    def _on_loaded(self, info: Any) -> None:
        print(f"selftest: loaded {info.name} on {info.device} ({info.dtype})", file=sys.stderr)
        from llm_lens.core.sampling import GREEDY

        panel = self.window.prompt_panel
        self.window.controller.request_run(
            panel.editor.toPlainText(), panel.chat_box.isChecked(), GREEDY, self.tokens
        )

    def _on_finished(self, summary: Any) -> None:
        print(
            f"selftest: generated {summary.output_text!r} (TTFT {summary.ttft_ms:.0f} ms)",
            file=sys.stderr,
        )
        self.window.controller.request_select(len(self.window.controller.steps) - 1)
        QTimer.singleShot(4000, self._check)  # let panes ask for and draw their analyses

    def _check(self) -> None:
        empty = [name for name, pane in self.window.panes.items() if not pane.render_times_ms]
        if empty:
            self._fail(f"panes that received no data: {', '.join(empty)}")
            return
        missing = missing_resources()
        if missing:
            self._fail(missing)
            return
        from llm_lens.desktop.fit_check import fit_problems

        problems = fit_problems(self.window, self.size)
        if problems:
            self._fail("the window does not fit:\n  " + "\n  ".join(problems))
            return
        if self.screenshot:
            if not self.window.grab().save(self.screenshot, "PNG"):
                self._fail(f"could not write {self.screenshot}")
                return
            print(f"selftest: screenshot written to {self.screenshot}", file=sys.stderr)
        print("selftest: ok", file=sys.stderr)
        self.exit_code = 0
        self.window.close()
        QApplication.quit()

    def _fail(self, reason: str) -> None:
        if self.exit_code == 0:
            return
        print(f"selftest: FAILED: {reason}", file=sys.stderr)
        self.exit_code = 1
        self.window.close()
        QApplication.quit()
