"""desktop.model_thread.trim: the model thread gives its freed heap back only after the window
has drawn what it was sent."""

from __future__ import annotations

import time

import pytest

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.runs.workbench import RunRequest
from llm_lens.core.sampling import GREEDY
from llm_lens.desktop.model_thread.worker import Worker


class Trims(list):
    """When the worker :meth:`worker` made gave the heap back (recorded, not run). Only its
    own: a worker of an earlier test, still alive, may have a delayed trim falling due now."""

    def worker(self, engine) -> Worker:
        worker = Worker()
        worker.workbench.engine = engine
        worker._release_memory = lambda: self.append(time.perf_counter())
        return worker


@pytest.fixture
def trims() -> Trims:
    return Trims()


def test_the_heap_is_trimmed_after_the_windows_last_repaints(
    tiny_engine, qtbot, monkeypatch, trims
):
    """glibc's trim holds the heap's lock: it waits until the run's end has been drawn."""
    from llm_lens.desktop.model_thread import worker as worker_module

    monkeypatch.setattr(worker_module, "TRIM_DELAY_MS", 200)
    worker = trims.worker(tiny_engine)
    worker.run(RunRequest(1, "the cat", False, GREEDY, RunConfig(max_new_tokens=2)))
    ended = time.perf_counter()
    assert trims == []
    qtbot.waitUntil(lambda: len(trims) == 1, timeout=3000)
    assert trims[0] - ended >= 0.15


def test_the_heap_goes_back_after_long_analyses_once_the_answer_is_drawn(
    tiny_engine, qtbot, monkeypatch, trims
):
    """The trim after long analyses waits until the window has drawn the answer (it ran while
    the Attention pane drew a full context's map: 72 ms instead of 40); a request that came
    meanwhile puts it off until after its own answer."""
    from llm_lens.desktop.model_thread import worker as worker_module

    monkeypatch.setattr(worker_module, "RELEASE_AFTER_MS", 5.0)  # the first job, not the second
    worker = trims.worker(tiny_engine)
    worker.submit("lens", ("lens", 0), lambda _bench: time.sleep(0.01))
    worker.serve()
    answered = time.perf_counter()
    assert trims == []
    worker.submit("lens", ("lens", 1), lambda _bench: None)  # asked before the delay was over
    qtbot.wait(worker_module.TRIM_AFTER_ANSWER_MS + 100)
    assert trims == []
    worker.serve()
    again = time.perf_counter()
    qtbot.waitUntil(lambda: len(trims) == 1, timeout=3000)
    assert trims[0] - again >= 0.8 * worker_module.TRIM_AFTER_ANSWER_MS / 1e3
    assert trims[0] - answered > worker_module.TRIM_AFTER_ANSWER_MS / 1e3


def test_a_runs_end_trim_overdue_after_long_analyses_waits_for_their_answer(
    tiny_engine, qtbot, monkeypatch, trims
):
    """A run's end's delayed trim falls due only when the worker's event loop runs again: after
    the prompt's analyses (4 s at the full context), just as the window draws their answer. It
    gives way to the answer's own delay."""
    from llm_lens.desktop.model_thread import worker as worker_module

    monkeypatch.setattr(worker_module, "TRIM_DELAY_MS", 100)
    worker = trims.worker(tiny_engine)
    worker.run(RunRequest(1, "the cat", False, GREEDY, RunConfig(max_new_tokens=2)))
    worker.submit("lens", ("lens", 0), lambda _bench: time.sleep(0.3))  # the run end's delay passes
    worker.serve()
    answered = time.perf_counter()
    qtbot.wait(50)  # the overdue timer fires
    assert trims == []
    qtbot.waitUntil(lambda: len(trims) == 1, timeout=3000)
    assert trims[0] - answered >= 0.8 * worker_module.TRIM_AFTER_ANSWER_MS / 1e3


def test_what_work_ahead_freed_goes_back_once_nothing_is_asked(
    tiny_engine, qtbot, monkeypatch, trims
):
    """The heap the guesses freed is kept for the request they guessed (given back, its pages
    cost a full context's new layer 25-30 ms of faults), and goes back :data:`TRIM_IDLE_MS`
    after them."""
    from llm_lens.desktop.model_thread import worker as worker_module

    monkeypatch.setattr(worker_module, "AHEAD_DELAY_MS", 0)
    monkeypatch.setattr(worker_module, "RELEASE_AFTER_MS", 5.0)
    monkeypatch.setattr(worker_module, "TRIM_IDLE_MS", 300)
    worker = trims.worker(tiny_engine)
    log: list[str] = []

    def guess(_bench) -> None:
        time.sleep(0.01)
        log.append("guess")

    worker.submit("attention_map", ("asked",), lambda _bench: time.sleep(0.06), (guess,))
    worker.serve()
    qtbot.waitUntil(lambda: log == ["guess"], timeout=3000)
    guessed = time.perf_counter()
    qtbot.waitUntil(lambda: len(trims) == 1, timeout=3000)
    assert trims[0] - guessed >= 0.8 * 0.3


def test_a_trim_comes_once_after_the_last_delay_asked(qtbot):
    from PySide6.QtCore import QObject

    from llm_lens.desktop.model_thread.trim import HeapTrim, has_event_loop

    released: list[float] = []
    owner = QObject()
    trim = HeapTrim(lambda: released.append(time.perf_counter()), lambda: False, owner)
    assert has_event_loop() and not trim.owed
    start = time.perf_counter()
    trim.later(50)
    trim.later(150)  # asked while the first runs: the trim waits for this one
    assert trim.owed and released == []
    qtbot.wait(100)
    assert released == []
    qtbot.waitUntil(lambda: len(released) == 1, timeout=2000)
    assert released[0] - start >= 0.14
    qtbot.wait(100)
    assert len(released) == 1


def test_a_trim_falling_due_while_a_request_waits_is_skipped(qtbot):
    from PySide6.QtCore import QObject

    from llm_lens.desktop.model_thread.trim import HeapTrim

    released: list[int] = []
    busy = [True]
    owner = QObject()
    trim = HeapTrim(lambda: released.append(1), lambda: busy[0], owner)
    trim.later(20)
    qtbot.wait(120)
    assert released == []  # the waiting request's serve asks again
    busy[0] = False
    trim.later(20)
    qtbot.waitUntil(lambda: released == [1], timeout=2000)


def test_without_an_event_loop_the_trim_is_at_once(monkeypatch):
    from PySide6.QtCore import QObject

    from llm_lens.desktop.model_thread import trim as trim_module

    monkeypatch.setattr(trim_module, "has_event_loop", lambda: False)
    released: list[int] = []
    trim = trim_module.HeapTrim(lambda: released.append(1), lambda: True, QObject())
    trim.later(10_000)
    assert released == [1] and trim.owed
