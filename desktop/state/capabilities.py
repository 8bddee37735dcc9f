"""What the shown run's engine fills, and the one line a pane shows where it fills nothing.

A model loaded here fills every capability; a model behind a server (``core.engines``) fills
only some, and a run reopened from a session keeps the engine it was made by. Owned by the
:class:`~llm_lens.desktop.state.controller.Controller` as ``controller.capabilities``; panes
ask through ``controller.why_not``, which delegates here.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject

OPENED_HEADS = 32  # heads a run brings back the rows of, at most: the last opened


class Capabilities(QObject):
    """``provides``: what the loaded engine fills (the worker's ``sig_provides``, before its
    ``sig_loaded``; None: a local model, which fills everything)."""

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)  # on the GUI thread: the worker's signals queue here
        self.ctl = controller
        self.provides: Any = None
        self.opened: dict[tuple[int, int], None] = {}  # heads opened, oldest first (NDIF)
        controller.worker.sig_provides.connect(self._on_provides)

    def _on_provides(self, provides: Any) -> None:
        self.provides = provides
        self.opened.clear()  # a new model: its heads are opened anew

    def head_rows(self) -> bool:
        """True when the loaded engine brings back the rows of the heads a run asks for
        (``Provides.head_rows``: NDIF) rather than whole maps."""
        return bool(getattr(self.provides, "head_rows", False))

    def open_head(self, layer: int, head: int) -> None:
        """The Attention pane shows ``(layer, head)``: the next run asks for its rows (the
        last :data:`OPENED_HEADS` opened)."""
        key = (int(layer), int(head))
        self.opened.pop(key, None)
        self.opened[key] = None
        while len(self.opened) > OPENED_HEADS:
            del self.opened[next(iter(self.opened))]

    def heads(self) -> tuple[tuple[int, int], ...]:
        """The heads the next run asks the engine for (``RunRequest.heads``), sorted; none
        where the engine draws whole maps."""
        return tuple(sorted(self.opened)) if self.head_rows() else ()

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
