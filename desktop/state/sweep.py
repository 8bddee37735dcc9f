"""Patching sweeps from the window: the request, the job on the model thread, its progress and
Cancel, the finished maps, and a clicked cell turned into the What-if intervention it stands for.

Owned by the :class:`~llm_lens.desktop.state.controller.Controller` as ``controller.sweep``. The
sweep is core's :func:`~llm_lens.core.interventions.sweep.patching_sweep`, run as a streaming job
(``Worker.stream``): Cancel sets the worker's cancel flag, which the sweep reads between its
forwards. Its progress comes back through a queued signal (the sweep calls it on the model
thread); the finished maps arrive as one frozen :class:`SweepMap`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Signal

from llm_lens.core.errors import LensError

SWEEP_PATCH = "sweep_patch"  # the worker job kind that reads a clicked head cell's patch
STARTED, DONE = "sweep_started", "sweep_done"  # the streaming job's items


@dataclass(frozen=True)
class SweepAsk:
    """What a sweep was asked for: the two prompts, the chat template, and the metric's tokens
    as text (``target`` empty: the clean prompt's own top token; ``other`` empty: the
    target's probability instead of a logit difference)."""

    clean: str
    corrupt: str
    chat: bool = True
    target: str = ""
    other: str = ""


@dataclass(frozen=True)
class SweepMap:
    """A finished sweep: what was asked, core's ``SweepResult``, the two prompts' token texts,
    the metric in words, and how long it took."""

    ask: SweepAsk
    result: Any  # core.interventions.sweep.SweepResult
    clean_tokens: tuple[str, ...]
    corrupt_tokens: tuple[str, ...]
    metric_text: str
    seconds: float

    def restored(self, value: float) -> float:
        """The share of the clean − corrupted gap a cell's ``value`` restores: 0 is the
        corrupted run's metric, 1 the clean run's (NaN when the two runs agree)."""
        gap = self.result.clean - self.result.corrupt
        if math.isnan(value) or gap == 0:
            return math.nan
        return float((value - self.result.corrupt) / gap)


def metric_token(engine: Any, text: str) -> int:
    """The id of ``text`` as one token, or one line naming the tokens it is."""
    ids = engine.tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        pieces = ", ".join(repr(engine.texts.text(i)) for i in ids)
        raise LensError(f"the metric token {text!r} is {len(ids)} tokens ({pieces}), not one")
    return int(ids[0])


def ask_problem(ask: SweepAsk) -> str:
    """'' when ``ask`` can be sent, else one line saying what to fix."""
    if not ask.clean.strip():
        return "type a clean prompt (the one whose answer the sweep traces)"
    if not ask.corrupt.strip():
        return "type a corrupted prompt: the clean one with a word or two changed"
    if ask.other.strip() and not ask.target.strip():
        return "name the answer token first (the second token is what it is compared with)"
    return ""


def sweep_job(ask: SweepAsk, progress: Any) -> Any:
    """``job(workbench)``: the sweep of ``ask`` on the model thread, yielding ``STARTED`` (the
    two prompts' token texts) and ``DONE`` (a :class:`SweepMap`); ``progress(done, total)``
    is called there. Built from values only."""

    def job(bench: Any) -> Any:
        from llm_lens.core.interventions.sweep import patching_sweep

        engine = bench.engine
        if getattr(engine, "model", None) is None:
            raise LensError("a patching sweep needs a model loaded here, not a server's")
        clean, corrupt = (engine.tokenize(t, chat=ask.chat) for t in (ask.clean, ask.corrupt))
        texts = tuple(t.text for t in clean.tokens), tuple(t.text for t in corrupt.tokens)
        metric = _metric(engine, ask, clean.ids)
        yield STARTED, texts
        t0 = time.perf_counter()
        result = patching_sweep(
            engine.model, clean.ids, corrupt.ids, metric, engine.anatomy, bench.cancel, progress
        )
        words = _metric_words(engine, metric)
        yield DONE, SweepMap(ask, result, *texts, words, time.perf_counter() - t0)

    return job


def _metric(engine: Any, ask: SweepAsk, clean_ids: list[int]) -> Any:
    """The ``Metric`` ``ask`` names; no target: the clean prompt's top token (one forward)."""
    import torch

    from llm_lens.core.interventions.sweep import Metric

    if ask.target.strip():
        target = metric_token(engine, ask.target)
    else:
        from llm_lens.core.placement import input_device

        ids = torch.tensor([clean_ids], device=input_device(engine.model))
        target = int(engine.model(input_ids=ids, use_cache=False).logits[0, -1].argmax())
    other = metric_token(engine, ask.other) if ask.other.strip() else None
    if other == target:
        raise LensError(f"the two metric tokens are the same token ({ask.other!r})")
    return Metric(target, other)


def _metric_words(engine: Any, metric: Any) -> str:
    a = repr(engine.texts.text(metric.a))
    if metric.b is None:
        return f"p({a})"
    return f"logit({a}) − logit({engine.texts.text(metric.b)!r})"


class SweepRunner(QObject):
    """The window's patching sweeps: one at a time, cancellable, the last map kept.

    Signals:
        sig_started(object): the two prompts' token texts (clean, corrupted), once tokenized.
        sig_progress(int, int): cells done, cells in all.
        sig_finished(object): the :class:`SweepMap`.
        sig_error(str): one line (a bad input, a cancelled sweep, a failed patch).
        sig_applied(str): a clicked cell's intervention is in the What-if list (what it is).
        sig_open_requested(): something asked for the sweep window (the What-if pane).
    """

    sig_started = Signal(object)
    sig_progress = Signal(int, int)
    sig_finished = Signal(object)
    sig_error = Signal(str)
    sig_applied = Signal(str)
    sig_open_requested = Signal()
    _progressed = Signal(int, int, int)  # job id, done, total: emitted on the model thread

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        self.ctl = controller
        self.running = -1  # the job id of the sweep running (-1: none)
        self.last: SweepMap | None = None
        self._owner = -1  # controller.run_id when the sweep set busy
        self._progressed.connect(self._on_progress)  # queued: a signal of this GUI object
        worker = controller.worker
        worker.sig_stream_item.connect(self._on_item)
        worker.sig_result.connect(self._on_result)
        worker.sig_error.connect(self._on_worker_error)
        controller.sig_model_loaded.connect(self._forget)

    # ----------------------------------------------------------------- requests
    def request(self, ask: SweepAsk) -> bool:
        """Start the sweep ``ask`` (a running one is cancelled first); False (and one line on
        ``sig_error``) when it cannot start."""
        problem = ask_problem(ask) or self._model_problem()
        if problem:
            self.sig_error.emit(problem)
            return False
        self.ctl.request_stop()  # a running generation or sweep ends first; this one queues
        job_id = self.ctl.new_run_id()
        self.running = job_id
        emit = self._progressed.emit
        self.ctl.request_stream(job_id, sweep_job(ask, lambda d, t: emit(job_id, d, t)))
        self._owner = self.ctl.run_id
        self.ctl.set_busy(True)
        return True

    def _model_problem(self) -> str:
        if self.ctl.model_info is None:
            return "no model is loaded yet"
        return self.ctl.why_not("interventions") or ""

    def cancel(self) -> None:
        """Stop the running sweep between two of its forwards."""
        if self.running >= 0:
            self.ctl.request_stop()

    def request_open(self) -> None:
        self.sig_open_requested.emit()

    def apply(self, kind: str, layer: int, index: int) -> None:
        """Add the patch cell (``kind`` "residual": layer × position; "heads": layer × head)
        of the last map stands for to the What-if list: the clean prompt's residual entering
        ``layer`` at position ``index``, or head ``index``'s output at every position. Read
        on the model thread; it arrives in the list (``sig_applied``) a moment later."""
        sweep = self.last
        if sweep is None:
            return
        ask = sweep.ask

        def job(bench: Any) -> Any:  # on the model thread
            from llm_lens.core.interventions.steer import head_patch_from, patch_from

            engine = bench.engine
            ids = engine.tokenize(ask.clean, ask.chat).ids
            if kind == "residual":
                return patch_from(engine.model, engine.anatomy, layer, ids, [index])
            return head_patch_from(engine.model, engine.anatomy, layer, index, ids)

        self.ctl.worker.submit(SWEEP_PATCH, (SWEEP_PATCH, ask, kind, layer, index), job)
        self.ctl.request_serve()

    # ----------------------------------------------------------------- the worker's items
    def _on_progress(self, job_id: int, done: int, total: int) -> None:
        if job_id == self.running:
            self.sig_progress.emit(done, total)

    def _on_item(self, job_id: int, tag: str, payload: Any) -> None:
        if job_id != self.running:
            return  # another view's job, or a superseded sweep
        if tag == STARTED:
            self.sig_started.emit(payload)
        elif tag == DONE:
            self.last = payload
            self._end()
            self.sig_finished.emit(payload)
        elif tag == "error":
            self._end()
            self.sig_error.emit(str(payload))

    def _end(self) -> None:
        self.running = -1
        if self.ctl.run_id == self._owner:
            self.ctl.set_busy(False)

    def _on_result(self, kind: str, _key: Any, result: Any) -> None:
        if kind == SWEEP_PATCH and result is not None:
            from llm_lens.desktop.state.whatif import describe

            self.ctl.whatif.add(result)
            self.sig_applied.emit(f"{describe(result)} from the clean prompt")

    def _on_worker_error(self, where: str, message: str) -> None:
        if where == "analysis" and message.startswith(SWEEP_PATCH.replace("_", " ")):
            self.sig_error.emit(message)

    def _forget(self, _info: Any) -> None:
        """A model was loaded: the last map was of the one before."""
        self.last = None
