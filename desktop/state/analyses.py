"""The analyses panes ask for: a cache of their results and the jobs that compute them.

Owned by the :class:`~llm_lens.desktop.state.controller.Controller` as ``controller.analyses``;
panes keep asking through ``controller.request_analysis`` / ``waiting_text`` / ``cached_result``,
which delegate here. A result arrives later as the controller's ``sig_result(kind, key, result)``.

A job runs on the model thread, maybe after the run shown has changed: it holds values taken
when it was asked (the run id, the recording, the worker's flags), never the controller
(:func:`analysis_job`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from llm_lens.core.runs.flags import WorkerFlags

CACHED = 64  # results kept; the oldest goes first
MODEL_WIDE = ("embedding_projection", "neighbours", "positions")  # not of one run


class AnalysisRequests:
    """Results by key ``(kind, scope, *sorted(args))`` (scope: the run id, or for a model-wide
    kind the weights id, a ``str``), and the keys asked for that have no answer yet."""

    def __init__(self, controller: Any) -> None:
        self.ctl = controller
        self._results: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._asked: set[tuple[Any, ...]] = set()

    def request(self, kind: str, args: dict[str, Any]) -> Any:
        """The cached result, or None after scheduling it (see ``Controller.request_analysis``)."""
        ctl = self.ctl
        flags = ctl.worker.flags
        flags.show(ctl.run_id)  # guesses computed ahead for another run are not wanted
        scope = ctl.run_id if kind not in MODEL_WIDE else getattr(ctl.info, "weights_id", "")
        key = (kind, scope, *sorted(args.items()))
        if key in self._results:
            return self._results[key]
        if ctl.recorded is not None:
            stored = ctl.recorded.get(kind, args)
            if stored is not None or not ctl.model_matches():
                return stored
        if key not in self._asked and ctl.model_info is not None:
            from llm_lens.core.loop.analyses import likely_next

            self._asked.add(key)
            job = analysis_job(kind, ctl.run_id, ctl.recorded, flags)
            guesses = likely_next(kind, args, ctl.model_info)
            ahead = tuple(partial(job, args=nxt, ahead=True) for nxt in guesses)
            ctl.worker.submit(kind, key, partial(job, args=args), ahead)
            ctl.request_serve()
        return None

    def waiting_text(self, what: str, computing: str) -> str:
        """What a pane says while ``what`` (in words) has no answer yet: ``computing``, or why
        none will come (a run reopened without that view recorded and without its model)."""
        ctl = self.ctl
        if ctl.recorded is None or ctl.model_matches():
            return computing
        name = getattr(ctl.info, "name", "its model")
        return f"the {what} is not in this session file: load {name} to compute it"

    def cached(self, kind: str, scope: Any, **args: Any) -> Any:
        """A result already computed (None if not), without scheduling anything."""
        return self._results.get((kind, scope, *sorted(args.items())))

    def results(self, kind: str) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """(key, result) of every cached result of ``kind``, oldest first."""
        return ((key, r) for key, r in list(self._results.items()) if key[0] == kind)

    def answered(self, key: Any, result: Any) -> bool:
        """The worker answered ``key``: keep ``result`` (False when there is none to announce:
        a dropped request, which may be asked again)."""
        self._asked.discard(key)
        if result is None:
            return False
        self._results[key] = result
        while len(self._results) > CACHED:
            self._results.popitem(last=False)
        return True

    def forget(self) -> None:
        """A model was loaded: every result belonged to the one before."""
        self._results.clear()
        self._asked.clear()

    def keep_model_wide(self) -> None:
        """A new run started: only the model-wide results (scoped by weights id) stay."""
        self._results = OrderedDict((k, v) for k, v in self._results.items() if _wide(k))
        self._asked = {k for k in self._asked if _wide(k)}


def _wide(key: tuple[Any, ...]) -> bool:
    return isinstance(key[1], str)


def analysis_job(kind: str, run_id: int, recorded: Any, flags: WorkerFlags) -> Callable[..., Any]:
    """``job(bench, args, ahead=False)``: ``kind`` of run ``run_id`` computed on the model
    thread, from ``recorded``'s run when a reopened run was shown, else from the workbench's
    store. Built from values only: the controller may show another run by the time it runs. A
    guess computed ahead (``ahead``) is skipped once its run is no longer the one shown."""

    def job(bench: Any, args: dict[str, Any], ahead: bool = False) -> Any:
        from llm_lens.core.loop.analyses import compute  # on the model thread: values only

        if ahead and flags.shown_run_id != run_id:
            return None  # a guess for a run no longer shown
        run = recorded.run if recorded is not None else bench.store.runs.get(run_id)
        return compute(kind, bench.engine, run, args)

    return job
