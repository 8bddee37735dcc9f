"""Branching: continue the shown run from its selected step with another token, keep every
branch in a tree, and (optionally) let an edited prompt reuse the unchanged prefix's KV cache.

The alternatives are the step's raw top-k with their probability before and after sampling. A
branch crops a copy of the run's KV cache instead of recomputing the prefix, streams into the
panes like a live run and is shown as a path: the root's prompt, the steps before the branch
point, the forced token, then the branch's own steps. Selecting a tree node shows its path.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt, QTimer
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from llm_lens.core.cards import p3
from llm_lens.desktop.state.controller import Controller
from llm_lens.desktop.state.scheduler import REPAINT_MS
from llm_lens.desktop.views.compare_columns import error_label
from llm_lens.desktop.widgets.token_text import visible

RUN_ID = Qt.ItemDataRole.UserRole
SERVED_NOTE = (
    "served: a branch is a new request on the text so far (the server tokenizes it afresh); "
    "the alternatives are the ones it returned; after sampling: ? (a server returns no logits "
    "to apply the sampler to); File → Save session keeps this tree"
)


class BranchView(QWidget):
    """The branch view (a dock). Reads the controller's selected step; requests go through
    ``controller.compare``."""

    title = "Branches"

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller, self.compare = controller, controller.compare
        self.alternatives: list[Any] = []
        self._timer = QTimer(self, singleShot=True, interval=REPAINT_MS)
        self._timer.timeout.connect(self.refresh)
        self._build()
        controller.sig_selection_changed.connect(self._schedule)
        controller.sig_run_started.connect(self._schedule)
        controller.sig_model_loaded.connect(self._schedule)  # the old model's ids go
        self.compare.sig_tree_changed.connect(self.set_nodes)
        self.compare.sig_error.connect(self._on_error)
        self.set_nodes(self.compare.nodes)  # a tree made before the view was first opened

    def _build(self) -> None:
        self.header = QLabel("select a step of a run to branch from", wordWrap=True)
        self.k_box = QSpinBox(minimum=2, maximum=50, value=10, prefix="top ")
        self.k_box.valueChanged.connect(self._schedule)
        self.max_tokens = QSpinBox(minimum=1, maximum=1024, value=16, prefix="then max ")
        self.max_tokens.setSuffix(" tokens")
        self.branch_button = QPushButton("Branch with the selected token")
        self.branch_button.clicked.connect(lambda: self.branch())
        top = QHBoxLayout()
        for w in (self.k_box, self.max_tokens):
            top.addWidget(w)
        top.addStretch(1)
        top.addWidget(self.branch_button)
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["token", "id", "raw prob", "after sampling"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.error = error_label()
        self.served_note = QLabel(SERVED_NOTE, wordWrap=True, visible=False)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["run", "prompt / branch point", "forced token", "cum. log-prob",
                                   "text"])  # fmt: skip
        self.tree.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.tree.currentItemChanged.connect(self._on_node)
        self.reuse = QCheckBox("reuse prompt prefix (Run reads only what the last cache lacks)")
        self.reuse.setToolTip("The status bar then says how many tokens were reused and the time")
        self.reuse.toggled.connect(self.compare.set_reuse_prefix)
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addLayout(top)
        layout.addWidget(self.table, 3)
        layout.addWidget(self.served_note)
        layout.addWidget(self.error)
        layout.addWidget(QLabel(
            "Runs of this session, with their branches and continuations "
            "(select one to show it in every pane; File → Save session saves them all)",
            wordWrap=True,
        ))  # fmt: skip
        layout.addWidget(self.tree, 2)
        layout.addWidget(self.reuse)

    # ----------------------------------------------------------------- alternatives
    def _schedule(self, *_: object) -> None:
        if self.isVisible() and not self._timer.isActive():
            self._timer.start()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt name)
        super().showEvent(event)
        self.refresh()

    def refresh(self) -> None:
        """List the selected step's alternatives (the first one not chosen is preselected)."""
        ctl = self.controller
        step = ctl.current_step()
        self.alternatives = self.compare.alternatives(self.k_box.value()) if step else []
        self.table.setRowCount(len(self.alternatives))
        for r, alt in enumerate(self.alternatives):
            final = "?" if alt.final_prob is None else f"{alt.final_prob:.4f}"
            label = visible(alt.text) + ("  (chosen)" if alt.chosen else "")
            tid = str(alt.token_id) if alt.token_id >= 0 else "—"  # a server naming texts only
            for c, text in enumerate((label, tid, f"{alt.prob:.4f}", final)):
                self.table.setItem(r, c, QTableWidgetItem(text))
        pick = next((r for r, a in enumerate(self.alternatives) if not a.chosen), -1)
        served = getattr(ctl.model_info, "architecture", "") == "served"
        self.served_note.setVisible(served and ctl.recorded is None)
        self.table.selectRow(pick)
        if step is None:
            self.header.setText("select a step of a run to branch from")
            return
        self.header.setText(
            f"step {step.index} of the shown run chose {visible(step.token.text)!r} "
            f"(p={p3(step.prob)}); pick another token to continue from there"
        )

    def branch(self, row: int | None = None) -> None:
        """Branch with the alternative in ``row`` (default: the selected one)."""
        self.error.setVisible(False)
        row = self.table.currentRow() if row is None else row
        if not 0 <= row < len(self.alternatives):
            self._on_error("branch", "pick an alternative token first")
            return
        alt = self.alternatives[row]
        self.compare.request_branch(
            self.controller.selected, alt.token_id, self.max_tokens.value(), alt.text
        )

    def _on_error(self, view: str, message: str) -> None:
        if view == "branch":
            self.error.setText(message)
            self.error.setVisible(True)

    # ----------------------------------------------------------------- tree
    def set_nodes(self, nodes: Any) -> None:
        """Rebuild the tree from ``BranchNode`` records; the shown run's node is current."""
        with QSignalBlocker(self.tree):
            self.tree.clear()
            items: dict[int, QTreeWidgetItem] = {}
            for node in nodes:
                point = f"step {node.offset - 1}"
                if node.branch_step is None:
                    text = node.prompt.replace("\n", "↵")
                    point = f"prompt {text[:40]!r}" + ("…" if len(text) > 40 else "")
                forced = "" if node.forced_token is None else repr(visible(node.forced_token.text))
                forced = "(continued)" if node.continued else forced
                plain = node.branch_step is not None or node.label in ("", "root", "run")
                named = not plain  # a compare column's name
                name = f"run {node.run_id}" + (f" · {node.label}" if named else "")
                name += " (recorded)" if self.compare.is_recorded(node.run_id) else ""
                cells = [name, point, forced, f"{node.cumulative_logprob:.3f}",
                         node.text.replace("\n", "↵")]  # fmt: skip
                parent = items.get(node.parent_run_id) if node.parent_run_id else None
                item = QTreeWidgetItem(parent if parent is not None else self.tree, cells)
                item.setData(0, RUN_ID, node.run_id)
                items[node.run_id] = item
            self.tree.expandAll()
            current = items.get(self.compare.current_node())
            if current is not None:
                self.tree.setCurrentItem(current)

    def _on_node(self, item: QTreeWidgetItem | None, _previous: object) -> None:
        if item is not None:
            self.compare.show_node(int(item.data(0, RUN_ID)))
