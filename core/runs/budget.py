"""The analysis budget and the work done ahead: which queued analysis runs when.

Analysis requests that arrive during a run are served between steps, within a budget: at most
:data:`ANALYSIS_SHARE` of the run's decode steps' own time so far (the prefill's does not count),
so the window's questions cannot slow the decoding more than that; the rest wait for the run's
end. A job runs between steps only when its expected cost fits what is left: a kind never timed,
or timed too dear, waits for the end rather than stall one step.

A pending request of a per-step kind (:data:`SUPERSEDED`: the lens of step 5 while the pane now
shows step 9) is dropped when a newer one of that kind arrives.

An analysis that took long enough to be felt (:data:`AHEAD_AFTER_MS`: a new layer's attention
window at 8,192 tokens) may name the requests likely to follow it (the maps a step away); they
become :attr:`AnalysisQueue.ahead`, computed by whoever drives the queue while nothing else is
asked. Plain logic: no thread, timer or model here (the window's worker runs the jobs).
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from typing import Any

ANALYSIS_SHARE = 0.03  # between steps of a run, analyses may take this share of the model's time
SUPERSEDED = ("lens", "attention_map", "neighbours")  # a newer request drops a pending older one
AHEAD_AFTER_MS = 50.0  # an analysis that took this long has its likely successors computed ahead

AnalysisJob = Callable[[Any], Any]  # job(workbench) -> the result (on the model's thread)
Pending = tuple[str, Any, AnalysisJob]  # (kind, key, job)


class AnalysisQueue:
    """Queued analyses, their cost estimates and the guesses to compute ahead.

    ``submit`` may be called from any thread; everything else runs on the one thread that serves
    the queue. ``cost_ms`` is the last time each kind took and ``cost_tokens`` the context length
    it took that at: most analyses grow with the context, so a map timed on a 40-token prompt
    must not be taken as cheap beside a 1,000-token one.
    """

    def __init__(self) -> None:
        self.pending: queue.Queue[Pending] = queue.Queue()
        self._ahead_of: dict[Any, tuple[AnalysisJob, ...]] = {}  # a pending job's guesses
        self.analysis_ms = 0.0  # time analyses took between the current run's steps
        self.model_ms = 0.0  # the current run's decode steps' own time
        self.cost_ms: dict[str, float] = {}
        self.cost_tokens: dict[str, int] = {}
        self.context_tokens = 1  # the tokens the current (or last) run's newest step had read
        self.ahead: list[tuple[str, AnalysisJob]] = []  # (kind, job) likely to come next
        self.slow: set[str] = set()  # kinds that took AHEAD_AFTER_MS or more on this run

    def submit(
        self, kind: str, key: Any, job: AnalysisJob, ahead: Sequence[AnalysisJob] = ()
    ) -> list[tuple[str, Any]]:
        """Queue ``job``; ``ahead``: jobs for the requests likely to follow it. Returns the
        (kind, key) of the pending jobs of the same per-step kind it dropped (their askers are
        owed an answer)."""
        dropped: list[Pending] = []
        with self.pending.mutex:
            if kind in SUPERSEDED:
                dropped = [item for item in self.pending.queue if item[0] == kind]
                for item in dropped:
                    self.pending.queue.remove(item)
                    self._ahead_of.pop(item[1], None)
            if ahead:
                self._ahead_of[key] = tuple(ahead)
        self.pending.put((kind, key, job))
        return [(old_kind, old_key) for old_kind, old_key, _ in dropped]

    def waiting(self) -> bool:
        """Whether a request is queued."""
        return not self.pending.empty()

    def new_job(self) -> None:
        """A run, job or model starts: the guesses were for what was shown before, and its
        budget starts from nothing."""
        self.ahead.clear()
        self.slow.clear()
        self.analysis_ms = self.model_ms = 0.0

    def step(self, position: int, decode_ms: float) -> float:
        """A run's step at context ``position`` took ``decode_ms`` of its own (0 for the
        prefill: a long prompt's seconds would otherwise pay for seconds of analyses between
        the first decode steps). Returns the analyses' budget now."""
        self.context_tokens = int(position) + 1
        self.model_ms += decode_ms
        return ANALYSIS_SHARE * self.model_ms

    def next_job(self, budget_ms: float | None) -> tuple[Pending, tuple[AnalysisJob, ...]] | None:
        """The oldest queued job (``budget_ms`` None), or the oldest whose expected cost fits
        what is left of the budget, and its guesses; None when none may run now."""
        with self.pending.mutex:
            chosen: Pending | None = None
            if budget_ms is None:
                chosen = self.pending.queue[0] if self.pending.queue else None
            else:
                left = budget_ms - self.analysis_ms
                chosen = next((i for i in self.pending.queue if self.expected_ms(i[0]) <= left),
                              None)  # fmt: skip
            if chosen is None:
                return None
            self.pending.queue.remove(chosen)
            return chosen, self._ahead_of.pop(chosen[1], ())

    def expected_ms(self, kind: str) -> float:
        """What ``kind`` should cost now: its estimate, scaled up with the context when it was
        timed on a shorter one; a kind not yet timed is taken as too dear to run between steps."""
        if kind not in self.cost_ms:
            return float("inf")
        timed_at = self.cost_tokens.get(kind, self.context_tokens)
        return self.cost_ms[kind] * max(1.0, self.context_tokens / max(1, timed_at))

    def timed(self, kind: str, ms: float) -> None:
        """Keep ``kind``'s cost estimate: the time it just took, or half the estimate when that
        is more. A request answered from a memo (a prompt map kept from the last one) takes no
        time, and must not make the next one, which computes, look free."""
        before = self.expected_ms(kind)
        self.cost_ms[kind] = max(ms, 0.5 * before) if before != float("inf") else ms
        self.cost_tokens[kind] = self.context_tokens
        self.analysis_ms += ms

    def answered(
        self, kind: str, took_ms: float, ahead: Sequence[AnalysisJob], between_steps: bool
    ) -> None:
        """A job of ``kind`` answered in ``took_ms``: once a kind took long on this run, its
        guesses (``ahead``) become the work ahead (not between a run's steps: those keep theirs).
        Stepping from one guessed answer to the next thus goes on guessing."""
        if took_ms >= AHEAD_AFTER_MS:
            self.slow.add(kind)
        if ahead and kind in self.slow and not between_steps:
            self.ahead = [(kind, job) for job in ahead]

    def next_guess(self) -> tuple[str, AnalysisJob] | None:
        """The likeliest request not asked yet, or None."""
        return self.ahead[0] if self.ahead else None

    def guessed(self, guess: tuple[str, AnalysisJob], took_ms: float) -> None:
        """``guess`` (from :meth:`next_guess`) was computed in ``took_ms``; the next one's turn
        (unless the guesses were replaced meanwhile)."""
        if took_ms >= AHEAD_AFTER_MS:
            self.slow.add(guess[0])
        if self.ahead and self.ahead[0] is guess:
            self.ahead.pop(0)


def decode_ms(record: Any) -> float:
    """What a step adds to the analyses' budget: a decode step's own time; the prefill none."""
    return 0.0 if record.index == 0 else float(record.timing.total_ms)
