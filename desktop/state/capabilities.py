"""What the shown run's engine fills, and the one line a pane shows where it fills nothing.

A model loaded here fills every capability; a model behind a server (``core.engines``) fills
only some, and a run reopened from a session keeps the engine it was made by. Owned by the
:class:`~llm_lens.desktop.state.controller.Controller` as ``controller.capabilities``; panes
ask through ``controller.why_not``, which delegates here.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject


class Capabilities(QObject):
    """``provides``: what the loaded engine fills (the worker's ``sig_provides``, before its
    ``sig_loaded``; None: a local model, which fills everything)."""

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)  # on the GUI thread: the worker's signals queue here
        self.ctl = controller
        self.provides: Any = None
        controller.worker.sig_provides.connect(self._on_provides)

    def _on_provides(self, provides: Any) -> None:
        self.provides = provides

    def why_not(self, capability: str) -> str | None:
        """None when the shown run's engine fills ``capability``; else what it lacks and how
        to get it (``Provides.why_not``)."""
        shown = self.ctl.shown
        from llm_lens.core.engines.openai.live import run_provides

        engine = None if shown.recorded is None else getattr(shown.session, "engine", None)
        found = self.provides if shown.recorded is None else None
        if engine:  # a reopened session's run made by another engine
            if engine.get("name") == "ndif":
                from llm_lens.core.engines.ndif.live import recorded_provides
            else:
                from llm_lens.core.engines.openai.live import recorded_provides
            found = recorded_provides(engine)
        found = run_provides(found, self.ctl.steps)  # a server that sent no logprobs
        return None if found is None else found.why_not(capability)
