"""``llm-lens --selftest``: the real window, the bundled model, a short run, every pane checked:
each received data, and each fits the window (no control outside it, no plot too small). The
short run is an intervened one (What if?: the first token forgotten, a head of the first
attention layer halved), after a one-token clean run of the same prompt it is compared with; the
status bar must mark it, and every pane that marks What-if runs must mark it and not the clean
run (``whatif_check``).

``llm-lens FILE --selftest`` checks that file instead: a session file is read (a damaged or
hostile one fails the selftest with one line, before anything else) and its shown run goes
through the same checks in place of the short run; a model folder or ``.gguf`` file is loaded
and run as ``--model`` would be.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

TIMEOUT_MS = 300_000
MARK_TRIES = 20  # the What-if marks are asked for up to 10 s after the run's analyses


def missing_resources() -> str:
    """What the installed package lacks of its shipped files ('' when nothing is missing)."""
    import json

    from llm_lens.desktop.widgets.resources import resource_dir

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
        file: str | None = None,
        screenshots: str | None = None,
    ) -> None:
        self.window = window
        self.file = file  # FILE: a session to show, or a model to load (see is_model_path)
        self.session: Any = None
        self.size = size  # --window-size: the window must fit it
        self.tokens = tokens
        self.screenshot = screenshot
        self.screenshots = screenshots  # --screenshots DIR: every pane saved after the checks
        self.exit_code = 1
        self.started = False
        self.clean_first = True  # a one-token clean run, then the intervened one
        c = window.controller
        c.sig_model_loaded.connect(self._on_loaded)
        c.sig_run_finished.connect(self._on_finished)
        c.sig_error.connect(lambda m: self._fail(f"error shown in the window: {m}"))
        QTimer.singleShot(TIMEOUT_MS, lambda: self._fail("timed out"))

    def start(self, model: str | None) -> bool:
        """Read FILE (when it is a session) and start loading the model; False when the
        selftest has already failed (the event loop need not run)."""
        if self.file is not None and is_model_path(self.file):
            model = self.file
        elif self.file is not None:
            from llm_lens.core.errors import LensError
            from llm_lens.core.sessions.read import load_session

            try:
                self.session = load_session(self.file)
            except (LensError, OSError) as exc:
                self._fail(f"cannot open the session file {exc}")
                return False
            print(f"selftest: read {self.file} ({len(self.session.runs)} runs)", file=sys.stderr)
        self.window.load(model)
        return True

    def _on_loaded(self, info: Any) -> None:
        if self.started:
            return  # a session shown announces its own model; the selftest goes on
        self.started = True
        print(f"selftest: loaded {info.name} on {info.device} ({info.dtype})", file=sys.stderr)
        if self.session is not None:
            self.window.sessions.confirm_close = False
            self.window.controller.sessions.show(self.session, self.file)
            return
        self._run(1)

    def _run(self, tokens: int) -> None:
        from llm_lens.core.sampling import GREEDY

        panel = self.window.prompt_panel
        self.window.controller.request_run(
            panel.editor.toPlainText(), panel.chat_box.isChecked(), GREEDY, tokens
        )

    def _on_finished(self, summary: Any) -> None:
        if self.session is None and self.clean_first:
            from llm_lens.desktop.startup.whatif_check import mark_problem, selftest_changes

            self.clean_first = False
            problem = mark_problem(self.window, intervened=False)
            if problem:
                self._fail(problem)
                return
            ctl = self.window.controller
            for change in selftest_changes(ctl.model_info):
                ctl.whatif.add(change)
            self._run(self.tokens)
            return
        what = "showing the session's run" if self.session is not None else "generated"
        print(
            f"selftest: {what} {summary.output_text!r} (TTFT {summary.ttft_ms:.0f} ms)",
            file=sys.stderr,
        )
        self.window.controller.request_select(len(self.window.controller.steps) - 1)
        QTimer.singleShot(4000, self._check)  # let panes ask for and draw their analyses

    def _check(self) -> None:
        empty = [name for name, pane in self.window.panes.items() if not pane.render_times_ms]
        if empty:
            self._fail(f"panes that received no data: {', '.join(empty)}")
            return
        mark = self.window.whatif_menus.mark
        if self.session is None and not mark.isVisible():
            self._fail("the intervened run is not marked in the status bar")
            return
        if self.session is None:
            print(f"selftest: {mark.toolTip()}", file=sys.stderr)
            self.window.controller.request_select(0)  # a step the clean run made too
            self._check_marks(MARK_TRIES)
            return
        self._check_rest()

    def _check_marks(self, tries: int) -> None:
        """Every pane marks the intervened run (asked again every half second while an
        analysis a mark needs may still be on its way), then the last step again."""
        from llm_lens.desktop.startup.whatif_check import mark_problem

        problem = mark_problem(self.window, intervened=True)
        if problem and tries > 1:
            QTimer.singleShot(500, lambda: self._check_marks(tries - 1))
            return
        if problem:
            self._fail(problem)
            return
        print("selftest: every pane marks the intervened run, none the clean one", file=sys.stderr)
        self.window.controller.request_select(len(self.window.controller.steps) - 1)
        QTimer.singleShot(1000, self._check_rest)

    def _check_rest(self) -> None:
        missing = missing_resources()
        if missing:
            self._fail(missing)
            return
        from llm_lens.desktop.startup.fit_check import fit_problems

        problems = fit_problems(self.window, self.size)
        if problems:
            self._fail("the window does not fit:\n  " + "\n  ".join(problems))
            return
        if self.screenshot:
            if not self.window.grab().save(self.screenshot, "PNG"):
                self._fail(f"could not write {self.screenshot}")
                return
            print(f"selftest: screenshot written to {self.screenshot}", file=sys.stderr)
        if self.screenshots:
            from llm_lens.desktop.startup.screenshots import PaneShots

            PaneShots(self.window, self.screenshots, self._shots_done).start()
            return
        self._pass()

    def _shots_done(self, reason: str) -> None:
        if reason:
            self._fail(f"screenshots in {self.screenshots}: {reason}")
        else:
            self._pass()

    def _pass(self) -> None:
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


def is_model_path(path: str) -> bool:
    """A model folder or GGUF file (loaded as ``--model``); anything else is a session file."""
    return os.path.isdir(path) or path.lower().endswith(".gguf")
