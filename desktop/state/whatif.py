"""The What-if list: the interventions the next run is made under, each on or off, and the clean
runs the intervened ones are compared with.

A right-click on a head, a layer, an expert or a token adds an intervention
(``llm_lens.core.interventions``) here; the What-if pane lists them. The controller sends the
ones switched on with every run (``RunRequest.interventions``): the model thread applies them
through core, as data, never a hook made here. Switching them all off gives the clean run.

The last clean runs are remembered by their prompt, so the panes can show an intervened step
beside the clean step that read the same context (the Logits pane's before/after bars).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Signal

from llm_lens.core.interventions import (
    BlockEdit,
    ExpertEdit,
    Forget,
    HeadEdit,
    HeadPatch,
    Intervention,
    ResidualAdd,
    ResidualPatch,
)

PATCH = "whatif_patch"  # the worker job kind that reads another prompt's residual stream
CLEAN_RUNS = 2  # clean runs remembered for comparison, by prompt
CLEAN_STEPS = 64  # of each, the first steps: a copy of their logits (12 MB for SmolLM2), so
# the run's own records are still let go (and freed on the model thread) with its history


@dataclass(frozen=True)
class CleanStep:
    """What a clean run's step is compared by: the context it read (a digest), the token it
    chose with its probability, its full logits and its residual norms per layer (copies), its
    timing and its experts' routing (frozen records, held as they are)."""

    index: int
    context: bytes
    token: Any  # TokenInfo
    prob: float
    logits: np.ndarray
    residual_norms: np.ndarray | None = None  # (layers + 1,) the Layer stack's faint line
    timing: Any = None  # StepTiming: the Timing pane's clean ticks
    routing: Any = None  # ExpertRouting of the positions the step read (None: a dense model)

    @classmethod
    def of(cls, step: Any) -> CleanStep:
        logits = np.array(step.logits, np.float32)
        logits.flags.writeable = False
        norms = getattr(step, "residual_norms", None)
        resid = None if norms is None else np.array(norms, np.float32)
        if resid is not None:
            resid.flags.writeable = False
        return cls(step.index, context_key(step.context_ids), step.token, step.prob, logits,
                   resid, step.timing, getattr(step, "routing", None))  # fmt: skip


def context_key(ids: Any) -> bytes:
    """A digest of a step's context ids: two steps read the same context when they agree."""
    return hashlib.blake2b(np.asarray(ids, np.int64).tobytes(), digest_size=16).digest()


@dataclass(frozen=True)
class WhatIfEntry:
    """One intervention of the list and whether the next run uses it."""

    intervention: Intervention
    on: bool = True


def describe(item: Intervention) -> str:
    """A short reading of one intervention: 'head 7.4 = 0', 'MLP 12 × 0.5', 'forget token 3'."""
    if isinstance(item, HeadEdit):
        how = "= prompt mean" if item.op == "mean" else _factor(item.factor)
        return f"head {item.layer}.{item.head} {how}"
    if isinstance(item, HeadPatch):
        return f"head {item.layer}.{item.head} patched"
    if isinstance(item, BlockEdit):
        part = {"mlp": "MLP", "mixer": "mixer"}.get(item.part, "attention")
        return f"{part} {item.layer} {_factor(item.factor)}"
    if isinstance(item, ExpertEdit):
        experts = ",".join(map(str, item.experts))
        return f"expert {item.layer}.{experts} " + ("off" if item.op == "off" else "forced")
    if isinstance(item, Forget):
        return f"forget token {item.position}"
    if isinstance(item, ResidualAdd | ResidualPatch):
        at = f" @{','.join(map(str, item.positions))}" if item.positions else ""
        what = "+ vector" if isinstance(item, ResidualAdd) else "patched"
        return f"residual {item.layer}{at} {what}"
    return type(item).__name__


def _factor(factor: float) -> str:
    return f"× {factor:g}" if factor else "= 0"


def mark_text(interventions: Any) -> str:
    """'intervened: head 7.4 = 0, forget token 3' ('' for a clean run)."""
    changes = tuple(interventions or ())
    return "intervened: " + ", ".join(describe(i) for i in changes) if changes else ""


class WhatIfList(QObject):
    """The interventions of the next run and the clean runs to compare with.

    Signals:
        sig_changed(): an intervention was added, removed or switched.
        sig_run_requested(): "Run with these": the window runs its prompt again.
        sig_error(str): a patch or a steering vector could not be made (one line).
    """

    sig_changed = Signal()
    sig_run_requested = Signal()
    sig_error = Signal(str)

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        self.controller = controller
        self.entries: list[WhatIfEntry] = []
        self._clean: dict[tuple[int, ...], tuple[CleanStep, ...]] = {}  # prompt ids → steps
        controller.sig_run_finished.connect(self._on_finished)
        self._listening = False  # to the worker's results (it is made after this list)

    # ----------------------------------------------------------------- the list
    def add(self, item: Intervention) -> None:
        """Add ``item`` (switched on); one already listed is switched on instead. An edit of
        the same head, block, expert set or token replaces the earlier one."""
        kept = [e for e in self.entries if _place(e.intervention) != _place(item)]
        self.entries = [*kept, WhatIfEntry(item)]
        self.sig_changed.emit()

    def remove(self, index: int) -> None:
        if 0 <= index < len(self.entries):
            del self.entries[index]
            self.sig_changed.emit()

    def switch(self, index: int, on: bool) -> None:
        """Switch entry ``index`` on or off (kept in the list either way)."""
        if 0 <= index < len(self.entries) and self.entries[index].on != on:
            self.entries[index] = WhatIfEntry(self.entries[index].intervention, on)
            self.sig_changed.emit()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self.sig_changed.emit()

    def active(self) -> tuple[Intervention, ...]:
        """The interventions switched on: what the next run is made under."""
        return tuple(e.intervention for e in self.entries if e.on)

    def request_patch(self, text: str, chat: bool, layer: int, positions: Any) -> None:
        """Add the patch that puts the residual stream entering ``layer`` at ``positions`` of
        the prompt ``text`` (run on the model thread) into the next runs: activation patching."""
        from llm_lens.core.interventions.steer import patch_from

        key = (PATCH, text, chat, layer, tuple(positions))

        def job(bench: Any) -> Any:  # on the model thread
            engine = bench.engine
            ids = engine.tokenize(text, chat).ids
            return patch_from(engine.model, engine.anatomy, layer, ids, positions)

        worker = self.controller.worker
        if not self._listening:
            worker.sig_result.connect(self._on_result)
            worker.sig_error.connect(self._on_error)
            self._listening = True
        worker.submit(PATCH, key, job)
        self.controller.request_serve()

    def add_vector(self, path: str, strength: float, layer: int, positions: Any) -> bool:
        """Add a steering vector read from a ``.npy`` file, times ``strength``, to the stream
        entering ``layer`` at ``positions`` (all when empty); False (and ``sig_error``) for a
        file that is not one finite vector of the model's width."""
        try:
            vector = np.asarray(np.load(path, allow_pickle=False), np.float64).ravel()
        except (OSError, ValueError) as exc:  # missing, not .npy, pickled objects
            self.sig_error.emit(f"{path}: not a readable .npy vector ({exc})")
            return False
        width = getattr(self.controller.info, "hidden_size", vector.size)
        streams = int(getattr(self.controller.info, "residual_streams", 1) or 1)
        widths = sorted({width, width * streams})  # or each of several streams its own part
        if vector.size not in widths or not np.isfinite(vector).all():
            self.sig_error.emit(
                f"{path}: {vector.size} numbers (finite: "
                f"{bool(np.isfinite(vector).all())}); the stream has "
                f"{' or '.join(str(w) for w in widths)}"
            )
            return False
        self.add(ResidualAdd(layer, tuple(positions), tuple(vector * float(strength))))
        return True

    def _on_result(self, kind: str, _key: Any, result: Any) -> None:
        if kind == PATCH and isinstance(result, ResidualPatch):
            self.add(result)

    def _on_error(self, where: str, message: str) -> None:
        if where == "analysis" and message.startswith(PATCH.replace("_", " ")):
            self.sig_error.emit(message)

    def request_run(self) -> None:
        """Run the prompt again with the interventions switched on."""
        self.sig_run_requested.emit()

    # ----------------------------------------------------------------- clean runs
    def _on_finished(self, _summary: Any) -> None:
        ctl = self.controller
        if ctl.interventions or ctl.prompt is None or not ctl.steps:
            return
        key = tuple(ctl.prompt.ids)
        self._clean.pop(key, None)
        self._clean[key] = tuple(CleanStep.of(s) for s in ctl.steps[:CLEAN_STEPS])
        while len(self._clean) > CLEAN_RUNS:
            self._clean.pop(next(iter(self._clean)))

    def has_clean(self, prompt: Any) -> bool:
        """Whether a clean run of ``prompt`` (``PromptTokens``) is remembered."""
        return prompt is not None and tuple(prompt.ids) in self._clean

    def clean_step(self, step: Any) -> CleanStep | None:
        """The step of a clean run that read exactly the context ``step`` read (None when no
        clean run of that prompt is remembered, it chose other tokens before there, or the
        step is past the first :data:`CLEAN_STEPS`)."""
        if step is None:
            return None
        index: int = step.index
        context = context_key(step.context_ids)
        for steps in reversed(self._clean.values()):
            if index < len(steps) and steps[index].context == context:
                return steps[index]
        return None


def forgotten(interventions: Any) -> tuple[int, ...]:
    """The positions a run's interventions hide from every later query (forgotten tokens)."""
    return tuple(sorted(i.position for i in interventions or () if isinstance(i, Forget)))


def forget_note(info: Any) -> str:
    """What ``forget:P`` cannot hide on the model ``info`` describes: 'attention layers only:
    the state-space layers still carry it' where some layers mix tokens otherwise (Mamba,
    DeltaNet, short convolution: their recurrent or convolution state holds the token, and no
    mask reaches it; a pure Mamba model has no attention to hide it from); '' where every
    mixer is attention (or the kinds are unknown)."""
    kinds = getattr(info, "layer_kinds", ()) or ()
    parts = {p for kind in kinds for p in kind.split(" + ")}
    others = sorted(p for p in parts if p != "none" and not _attends(p))
    if not others:
        return ""
    carry = f"the {' and '.join(others)} layers still carry it"
    if not any(_attends(p) for p in parts):
        return f"no attention layer to hide it from: {carry}"
    return f"attention layers only: {carry}"


def _attends(part: str) -> bool:
    """Is this mixer kind attention a mask reaches (as ``ModelInfo.has_attention`` reads it)?"""
    return part.endswith("attention") and part != "linear attention"


def head_change(interventions: Any, layer: int, head: int) -> str:
    """'intervened: head 7.4 = 0' when a run's interventions change that head (its own edit,
    or its layer's whole attention block); '' when they leave it alone."""
    for item in interventions or ():
        mine = isinstance(item, HeadEdit | HeadPatch) and (item.layer, item.head) == (layer, head)
        block = isinstance(item, BlockEdit) and item.part == "attn" and item.layer == layer
        if mine or block:
            return f"intervened: {describe(item)}"
    return ""


def _place(item: Intervention) -> tuple[Any, ...]:
    """What an intervention acts on: two edits of one place do not stack in the list."""
    if isinstance(item, HeadEdit | HeadPatch):
        return ("head", item.layer, item.head)
    if isinstance(item, BlockEdit):
        return ("block", item.layer, item.part)
    if isinstance(item, ExpertEdit):
        return ("expert", item.layer, item.experts)
    if isinstance(item, Forget):
        return ("forget", item.position)
    return ("other", item)


# ---- what a right-click offers (the panes' ``context_targets`` call these) ----------------------


def head_changes(layer: int, head: int, info: Any = None) -> list[Intervention]:
    """A head: off, halved, doubled, or its prompt mean; none where ``info`` (the loaded
    model's ``ModelInfo``) says the layer computes no attention (a hybrid's Mamba, DeltaNet or
    short convolution layer: it has no heads to change)."""
    if info is not None and not info.has_attention(layer):
        return []
    scaled: list[Intervention] = [HeadEdit(layer, head, "scale", f) for f in (0.0, 0.5, 2.0)]
    return [*scaled, HeadEdit(layer, head, "mean")]


def block_changes(layer: int) -> list[Intervention]:
    """A layer's attention block and MLP: off or halved."""
    return [BlockEdit(layer, part, f) for f in (0.0, 0.5) for part in ("attn", "mlp")]


def expert_changes(layer: int, expert: int) -> list[Intervention]:
    """An expert of a router: forbidden, or the only one routed to."""
    return [ExpertEdit(layer, (expert,), "off"), ExpertEdit(layer, (expert,), "force")]


def token_changes(position: int) -> list[Intervention]:
    """A token: hidden from every later query (forgotten from the KV cache)."""
    return [Forget(position)]
