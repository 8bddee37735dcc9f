"""What every pane shares: subscription to the controller, coalesced repaint, export."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from PySide6.QtCore import QCoreApplication, QEvent, Qt
from PySide6.QtWidgets import QLabel, QWidget

from llm_lens.core.exports.table import write_csv
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.widgets.axes import plain_axes, plain_axis, steady_axes
from llm_lens.desktop.widgets.common import keep_tab_names
from llm_lens.desktop.widgets.export import export_image

if TYPE_CHECKING:
    from llm_lens.core.cards import Explainer
    from llm_lens.desktop.widgets.card import Card

__all__ = [
    "LAYOUT_ROUNDS",
    "ContextTarget",
    "HoverTarget",
    "Pane",
    "plain_axes",
    "plain_axis",
    "steady_axes",
]

LAYOUT_ROUNDS = 3  # rounds of posted layout requests a pane's paint sends: the pane's, a card's,
# the pane's again for the card's new height (one more is harmless: nothing is pending)


class HoverTarget(NamedTuple):
    """A plot whose hover readout a pane writes: ``text_of(x, y)`` gets the view coordinates
    under the mouse and returns one line ('' outside the data: the readout keeps its text)."""

    plot: Any  # a pyqtgraph PlotItem
    text_of: Callable[[float, float], str]
    scene: Any = None  # the scene whose mouse moves to follow (None: the plot's own)


class ContextTarget(NamedTuple):
    """A place a right-click offers What-if changes: ``changes_of(x, y)`` gets the view
    coordinates under the mouse (a plain widget's own pixel coordinates) and returns the
    ``core.interventions`` values to offer there, first the likeliest ([] outside the data)."""

    plot: Any  # a pyqtgraph PlotItem, or a plain QWidget
    changes_of: Callable[[float, float], list[Any]]


class Pane(QWidget):
    """Base of all panes. Subclasses implement :meth:`render` and :meth:`clear`.

    ``render(step)`` is called with the selected ``StepRecord`` (or None) at most ~30 times a
    second, one pane per event-loop turn (:mod:`desktop.panes.scheduler`); while a run streams,
    less often, within the scheduler's share of the GUI thread; ``on_result``
    receives analysis results the pane asked for with
    ``controller.request_analysis``. ``title`` names the dock.

    A pane holds its whole story: besides drawing, it marks the selected token
    (:meth:`install_marks`, :meth:`mark_token`), names what is under the mouse
    (:meth:`hover_targets`, :meth:`readout_label`) and fills its "how to read this" card
    (:meth:`explainer`, :meth:`attach_card`). ``desktop.teaching`` calls these hooks for every
    pane alike; the defaults do nothing.
    """

    title = "Pane"
    live_interval_ms = 0  # slower than the scheduler's LIVE_MS while a run streams (heavy panes)
    card_follows_token = False  # the card's numbers are about the selected token
    card_follows_params = False  # ... or about the sampling settings
    empty_text = ""  # one line, centred in the pane until it has a step to show: what it
    # will show and how to get there ('': no line, as for a pane made in a test)
    capability: str | None = None  # the record it draws (core.engines.base.CAPABILITIES): where
    # the shown run's engine lacks it, the note says why and how to get it, and nothing is drawn

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.render_times_ms: list[float] = []
        self.paint_times_ms: list[float] = []
        self._stale = False  # a run started: clear before the next render
        self.after_render: list[Any] = []  # run after each render (desktop.teaching.linking)
        self._deferred = False  # a render skipped while hidden during a run: due when shown
        self._held = False  # the minimum size is fixed (at the first show)
        self._in_front = True  # its dock's tab is the one shown (set_in_front)
        self.linked: dict[str, Any] = {}  # what the selection marks show (tests read data)
        self.card: Card | None = None  # its "how to read this" card, once attached
        self.readout: QLabel | None = None  # its hover readout line, once made
        controller.sig_selection_changed.connect(self.schedule)
        controller.sig_steps_changed.connect(self.schedule)
        controller.sig_run_started.connect(self._on_run_started)
        controller.sig_model_loaded.connect(self._on_model_loaded)
        controller.sig_result.connect(self.on_result)
        controller.sig_busy_changed.connect(self._on_busy_changed)
        self.empty_note = self._make_empty_note() if self.empty_text else None

    def _make_empty_note(self) -> QLabel:
        """The line that says, before the first run, what this pane will show and how to get
        there: a newcomer sees an invitation, not black empty plots. It floats over the pane
        (no layout: the plots keep their size) and goes at the first render with a step."""
        note = QLabel(self.empty_text, self)
        note.setObjectName("empty_note")
        note.setWordWrap(True)
        note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        note.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        note.setStyleSheet(
            "QLabel#empty_note { background: rgba(20, 20, 28, 225); color: #e8e8e8;"
            " border: 1px solid #556; border-radius: 6px; padding: 8px; }"
        )
        return note

    def _place_empty_note(self) -> None:
        """Centre the note above the plots: one line where the pane is wide enough."""
        note = self.empty_note
        if note is None:
            return
        one_line = note.fontMetrics().horizontalAdvance(note.text()) + 24  # + padding, border
        width = max(120, min(one_line, int(self.width() * 0.92)))
        height = note.heightForWidth(width)
        note.setGeometry(
            (self.width() - width) // 2, max(0, (self.height() - height) // 2), width, height
        )
        note.raise_()

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        self._place_empty_note()

    def missing_line(self) -> str | None:
        """The line saying the shown run's engine does not provide :attr:`capability` (a
        server reports no attention…), or None when it does."""
        why_not = getattr(self.controller, "why_not", None)
        if self.capability is None or why_not is None:
            return None
        line: str | None = why_not(self.capability)
        return line

    def show_empty_note(self, shown: bool, text: str | None = None) -> None:
        """Show the note while the pane has no step to show (before a run, after a model
        switch), hide it once it has one. ``text``: a line in place of :attr:`empty_text`
        (what the engine does not provide)."""
        note = self.empty_note
        if note is not None and note.text() != (text or self.empty_text):
            note.setText(text or self.empty_text)
            self._place_empty_note()
        if note is not None and shown != note.isVisibleTo(self):
            note.setVisible(shown)
            if shown:
                self._place_empty_note()

    def schedule(self, *_: object) -> None:
        """Ask for a render; the scheduler runs it soon, never in the same turn as another pane.

        A pane not on screen while a run streams is not even queued: it is marked due for when
        it is shown or the run ends (every wake-up of the GUI thread takes the GIL)."""
        from llm_lens.desktop.state.scheduler import scheduler

        if self.hidden_while_streaming():
            self._deferred = True
            return
        scheduler().request(self)

    def render_and_paint(self) -> None:
        """Render the selected step, then paint now if shown (the scheduler's one unit of work)."""
        import time

        if self.hidden_while_streaming():
            self._deferred = True  # a tab behind another, a closed dock: no work for the GIL
            return
        t0 = time.perf_counter()
        if self._stale:
            self._stale = False
            self.clear()
        missing = self.missing_line()
        step = None if missing else self.controller.current_step()
        self.render(step)
        self.show_empty_note(step is None, missing)
        for hook in self.after_render:
            hook()
        t1 = time.perf_counter()
        self.paint_now()
        self.render_times_ms.append((t1 - t0) * 1e3)
        self.paint_times_ms.append((time.perf_counter() - t1) * 1e3)

    def hidden_while_streaming(self) -> bool:
        """True while a run streams in and this pane is not on screen in a shown window.

        Its renders wait until it is shown or the run ends: every render is Python on the GUI
        thread, which holds the GIL the model thread needs between the modules of each layer.
        A dock's tab behind another's is still visible to Qt (the tabs share one place and the
        selected one is raised), so its dock tells the pane (:meth:`set_in_front`).
        """
        on_screen = self.isVisible() and self._in_front
        return bool(self.controller.busy) and self.window().isVisible() and not on_screen

    def set_in_front(self, shown: bool) -> None:
        """Its dock was shown or hidden, or its tab selected or another's
        (``QDockWidget.visibilityChanged``); a render skipped meanwhile comes now."""
        self._in_front = shown
        if shown:
            self._render_deferred()

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt name)
        super().showEvent(event)
        plain_axes(self)
        keep_tab_names(self.window())  # its dock's tab bar, made by the window as it tabbed
        self.hold_minimum()
        self._place_empty_note()
        self._render_deferred()

    def _render_deferred(self) -> None:
        if self._deferred:
            self._deferred = False
            self.schedule()

    def hold_minimum(self) -> None:
        """Fix this pane's minimum size at what it needs when first shown.

        Left to its layout, the minimum follows the content: a label that wraps to one more
        line, a card's headline, grow it by a few pixels, and when that passes the dock's
        height the window lays out every dock again and repaints every pane in one turn (a
        50 ms pause at a run's end, measured). Held, the pane's plots give up those pixels
        instead, and what a run writes never moves the docks.
        """
        if not self._held:
            self._held = True
            self.setMinimumSize(self.minimumSizeHint())

    def _on_busy_changed(self, busy: bool) -> None:
        if busy:
            return
        from llm_lens.desktop.state.scheduler import scheduler

        if self._deferred:  # the run ended: every pane shows its last step
            self._deferred = False
            self.schedule()
        scheduler().wake()  # no live rate or rest left: the final step renders now

    def paint_now(self) -> None:
        """Lay out, settle and paint this pane's plots now, inside the scheduler's turn.

        Left to the event loop, every pane's queued scene update would be painted in one batch
        of posted events, with no timer (nor input) in between. pyqtgraph also updates view
        transforms in ``prepareForPaint``, inside the paint; the items it moves there mark the
        scene dirty again and Qt paints the view twice. Done here, in that order, one render
        reaches the screen in one paint.

        Layout requests go out in :data:`LAYOUT_ROUNDS` rounds: a layout that resizes a card
        posts the card's request, whose new height posts the pane's again, and a request
        posted while they are sent waits for the next call. Left to the event loop, that last
        one resized the plots a few pixels after the unit and painted them a second time (4-10
        ms a unit), beside the model's prefill or its steps.
        """
        import pyqtgraph as pg

        app = QCoreApplication.instance()
        if app is None:
            return
        for _ in range(LAYOUT_ROUNDS):
            app.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        for view in self.findChildren(pg.GraphicsView):
            if view.isVisible():
                scene = view.scene()
                scene.prepareForPaint()
                app.sendPostedEvents(scene, QEvent.Type.MetaCall)

    def _on_run_started(self, _prompt: object) -> None:
        """Clear in this pane's own scheduler turn: nine panes cleared at once (every scene
        dirty) were painted in one 60-80 ms batch at the start of each run."""
        self._stale = True
        self.schedule()

    def _on_model_loaded(self, _info: object) -> None:
        self.clear()
        self.schedule()  # panes may prepare model-wide views (the vocabulary scatter) now

    def render(self, step: Any) -> None:  # type: ignore[override]  # Qt's render paints
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError

    def on_result(self, kind: str, key: object, result: object) -> None:
        """Analysis results arrive here; ignore the kinds this pane did not ask for."""

    # ----------------------------------------------------------------- its story
    def install_marks(self) -> bool:
        """Add the items that mark the selected token and the gestures that select one.

        Returns False (the default) when this pane shows no single token: it is then never
        asked to :meth:`mark_token`."""
        return False

    def mark_token(self, position: int) -> None:
        """Move the marks to context position ``position`` (-1: none) and keep what they
        highlight in :attr:`linked`. Called after each render and when the selection moves."""

    def hover_targets(self) -> list[HoverTarget]:
        """The plots whose hover readout this pane writes (none by default)."""
        return []

    def readout_label(self) -> QLabel:
        """The label the hover readout writes to: by default a new line under the pane."""
        label = QLabel()
        label.setWordWrap(True)
        label.setToolTip("What is under the mouse")
        layout = self.layout()
        if layout is not None:
            layout.addWidget(label)
        self.readout = label
        return label

    def clean_step(self, step: Any) -> Any:
        """The clean run's copy of ``step`` (``state.whatif.CleanStep``: its logits, residual
        norms, token) when the shown run is intervened and a clean run read the same context;
        else None. Panes draw the difference from it (What if?)."""
        ctl = self.controller
        return ctl.whatif.clean_step(step) if ctl.interventions else None

    def context_targets(self) -> list[ContextTarget]:
        """Where a right-click offers What-if changes (a head, a layer, an expert, a token):
        the window adds the one chosen to ``controller.whatif``. None by default."""
        return []

    def explainer(self) -> Explainer | None:
        """The card text now: the selected step's numbers in words (None: nothing to explain,
        the default). May raise IndexError, ValueError or KeyError while a new run arrives."""
        return None

    def attach_card(self, card: Card) -> None:
        """Put the card at the bottom of the pane (override to also wire it to a control)."""
        layout = self.layout()
        if layout is not None:
            layout.addWidget(card)
        self.card = card

    # ----------------------------------------------------------------- export
    def plot_items(self) -> list[Any]:
        """The pyqtgraph PlotItems/scenes this pane exports as PNG/SVG (override)."""
        return []

    def csv_table(self) -> tuple[Sequence[str], Sequence[Sequence[Any]]]:
        """(header, rows) of the data shown now (override)."""
        return (), ()

    def export_csv(self, path: str | Path) -> None:
        """The pane's ``csv_table``, written atomically; a cell a spreadsheet would run as a
        formula (a token's text beginning with =, +, - or @) is written as text."""
        write_csv(path, *self.csv_table())

    def export_image(self, path: str | Path) -> None:
        """PNG or SVG by suffix (:func:`~llm_lens.desktop.widgets.export.export_image`)."""
        export_image(self, path)

    def svg_widget(self) -> QWidget:
        """The widget painted into an SVG export (override to export only the plots)."""
        return self
