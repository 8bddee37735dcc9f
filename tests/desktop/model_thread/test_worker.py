"""Analyses between a run's steps stay within a share of the model's time; a newer request of a
per-step kind drops the pending older one (answered None, so it can be asked again); work
ahead fills the memo while idle."""

from __future__ import annotations

import time

import numpy as np
import pytest

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.runs.budget import ANALYSIS_SHARE
from llm_lens.core.runs.workbench import RunRequest
from llm_lens.core.sampling import GREEDY
from llm_lens.desktop.model_thread.worker import Worker
from tests.desktop.conftest import wait_result


def test_analyses_between_steps_stay_within_their_share(tiny_engine):
    worker = Worker()
    worker.workbench.engine = tiny_engine
    steps: list[object] = []
    worker.sig_step.connect(lambda _run, record: steps.append(record))
    served: list[int] = []

    def job(i: int):
        def run(_bench) -> int:
            served.append(len(steps))
            time.sleep(0.03)
            return i

        return run

    worker.queue.cost_ms = {"attention_overview": 0.0}  # timed before: cheap, as far as it knows
    for i in range(6):
        worker.submit("attention_overview", ("overview", i), job(i))
    worker.run(RunRequest(1, "the cat sat on the mat", False, GREEDY, RunConfig(max_new_tokens=8)))
    assert len(steps) == 8
    model_ms = sum(s.timing.total_ms for s in steps)
    during = len(served)
    assert during == 1  # the first at once; then 30 ms each: not between steps of a few ms
    assert worker.queue.analysis_ms <= ANALYSIS_SHARE * model_ms + 40.0
    worker.serve()  # the run ended: the rest run now
    assert len(served) == 6 and served[-1] == 8


def test_a_newer_per_step_request_drops_the_pending_one():
    worker = Worker()
    results: list[tuple[str, object, object]] = []
    worker.sig_result.connect(lambda kind, key, result: results.append((kind, key, result)))
    worker.submit("lens", ("lens", 1), lambda _bench: "lens 1")
    worker.submit("prompt_lens", ("prompt_lens",), lambda _bench: "prompt")
    worker.submit("lens", ("lens", 2), lambda _bench: "lens 2")
    assert results == [("lens", ("lens", 1), None)]  # dropped, nothing cached
    worker.serve()
    assert results[1:] == [
        ("prompt_lens", ("prompt_lens",), "prompt"),
        ("lens", ("lens", 2), "lens 2"),
    ]


def test_a_job_that_would_overrun_the_budget_waits_while_a_cheap_one_runs(tiny_engine):
    worker = Worker()
    worker.workbench.engine = tiny_engine
    worker.queue.cost_ms = {"attention_overview": 5_000.0, "lens": 0.0}
    order: list[str] = []
    worker.submit("attention_overview", ("overview",), lambda _bench: order.append("overview"))
    worker.submit("lens", ("lens", 1), lambda _bench: order.append("lens"))
    worker.run(RunRequest(1, "the cat sat on the mat", False, GREEDY, RunConfig(max_new_tokens=4)))
    assert order == ["lens"]  # the overview took 5 s last time: not between these steps
    worker.serve()
    assert order == ["lens", "overview"]


def test_the_prefill_does_not_pay_for_analyses_between_decode_steps():
    """A long prompt's prefill (1 s here) earns no analysis time: a 50 ms job known from
    before waits while the decode steps' own time (10 ms each) allows 1 ms a step."""
    from types import SimpleNamespace

    worker = Worker()
    worker.workbench.engine = object()  # the job below does not use it
    worker.queue.cost_ms = {"lens": 50.0}
    ran: list[int] = []
    steps = [(0, 1000.0), (1, 10.0), (2, 10.0), (3, 10.0)]

    def job(_worker):
        for index, ms in steps:
            yield (
                "step",
                SimpleNamespace(
                    index=index, position=30 + index, timing=SimpleNamespace(total_ms=ms)
                ),
            )

    worker.submit("lens", ("lens", 3), lambda _bench: ran.append(1))
    worker._drive(1, job, "run")
    assert ran == []  # 10 % of 1,030 ms would have let it run after the first decode step
    worker.serve()
    assert ran == [1]


def test_a_cost_timed_on_a_short_context_grows_with_a_longer_one():
    """A map that took 20 ms on a 40-token prompt is not cheap beside a 1,000-token one: between
    decode steps (10 ms each, 1 ms of budget a step) it waits for the run's end."""
    from types import SimpleNamespace

    worker = Worker()
    worker.workbench.engine = object()
    worker.queue.cost_ms, worker.queue.cost_tokens = {"attention_map": 20.0}, {"attention_map": 40}
    ran: list[int] = []

    def job(_worker):
        for index in range(1, 40):
            timing = SimpleNamespace(total_ms=10.0)
            yield "step", SimpleNamespace(index=index, position=999 + index, timing=timing)

    worker.submit("attention_map", ("map", 0, 0), lambda _bench: ran.append(1))
    worker._drive(1, job, "run")
    assert ran == []  # 39 ms of budget: 20 ms at 40 tokens is ~500 ms at 1,000
    assert worker.queue.expected_ms("attention_map") == 20.0 * 1039 / 40
    worker.serve()
    assert ran == [1] and worker.queue.cost_tokens["attention_map"] == 1039


def test_a_kind_never_timed_waits_for_the_run_end_and_a_memo_hit_does_not_make_it_cheap(
    tiny_engine,
):
    """The first attention map of a session costs an unknown time: it waits for the run's end.
    A later request answered from the memo (0 ms) leaves half the estimate, not zero."""
    worker = Worker()
    worker.workbench.engine = tiny_engine
    order: list[str] = []
    worker.submit("attention_overview", ("overview",), lambda _bench: order.append("overview"))
    worker.run(RunRequest(1, "the cat sat on the mat", False, GREEDY, RunConfig(max_new_tokens=4)))
    assert order == []
    worker.serve()
    assert order == ["overview"]
    worker.queue.cost_ms["attention_map"] = 200.0
    worker.submit("attention_map", ("map", 0, 0), lambda _bench: None)  # a memo hit: no time at all
    worker.serve()
    assert worker.queue.cost_ms["attention_map"] >= 100.0


def test_jobs_served_while_no_run_streams_use_every_core(tiny_engine, monkeypatch):
    """Between a run's steps a job keeps the model's thread count (the GUI's core stays free for
    the window rendering the run); served once the run is over, while the window waits for
    it, a job has every core, and the model's count comes back after."""
    import os

    import torch

    monkeypatch.delenv("LLM_LENS_THREADS", raising=False)
    model_threads = torch.get_num_threads()
    worker = Worker()
    worker.workbench.engine = tiny_engine
    worker.queue.cost_ms = {"lens": 0.0}  # cheap, as far as it knows: served between steps
    threads: list[int] = []
    worker.submit("lens", ("lens", 1), lambda _bench: threads.append(torch.get_num_threads()))
    worker.run(RunRequest(1, "the cat sat on the mat", False, GREEDY, RunConfig(max_new_tokens=3)))
    worker.submit("lens", ("lens", 2), lambda _bench: threads.append(torch.get_num_threads()))
    worker.serve()
    assert threads == [model_threads, os.cpu_count()]
    assert torch.get_num_threads() == model_threads

    monkeypatch.setenv("LLM_LENS_THREADS", str(model_threads))  # the user's count holds
    worker.submit("lens", ("lens", 3), lambda _bench: threads.append(torch.get_num_threads()))
    worker.serve()
    assert threads[-1] == model_threads


def test_likely_next_requests_run_ahead_while_idle_and_give_way(tiny_engine, qtbot, monkeypatch):
    """After an analysis that took long enough to be felt, the requests it names as likely next
    run on the worker once nothing else is asked; a map among them stops between its row
    blocks for a request that arrives (served first), then goes on. A run drops them; the
    guesses of a kind that took no long time on this run do not run."""
    from PySide6.QtCore import QTimer

    from llm_lens.core import attention
    from llm_lens.core.attention import maps, prompt_maps
    from llm_lens.desktop.model_thread import worker as worker_module

    monkeypatch.setattr(worker_module, "AHEAD_DELAY_MS", 0)
    monkeypatch.setattr(prompt_maps, "EVERY_HEAD_SCORES", 0)  # one head's map, in row blocks
    monkeypatch.setattr(maps, "ROWS_AT_ONCE", 16)  # where it is read
    worker = Worker()
    worker.workbench.engine = tiny_engine
    run = tiny_engine.start(tiny_engine.tokenize("the cat sat on the mat " * 6, chat=False),
                            GREEDY, RunConfig(max_new_tokens=2))  # fmt: skip
    run.run_all()
    hidden = run.prefill.hidden
    results: list[object] = []
    worker.sig_result.connect(lambda kind, key, result: results.append(key))
    log: list[str] = []

    def slow(_bench) -> str:
        time.sleep(0.06)
        return "asked"

    def ahead_map(_bench) -> None:
        log.append("map")
        if log.count("map") == 1:  # something is asked while it computes (as a window asks)
            worker.submit("lens", ("lens", 1), lambda _bench: log.append("lens"))
            QTimer.singleShot(0, worker.serve)
        attention.attention_map(tiny_engine, run.cache, hidden, 1, 3, max_size=512)
        log.append("map done")

    tiny_engine.map_memo.clear()
    worker.submit(
        "attention_map", ("asked",), slow, (ahead_map, lambda _bench: log.append("second"))
    )
    worker.serve()
    qtbot.waitUntil(lambda: "second" in log, timeout=5000)
    assert log == ["map", "lens", "map", "map done", "second"]
    assert results == [("asked",), ("lens", 1)]  # guesses answer nobody
    kept = tiny_engine.map_memo["maps"][(1, 3)][0]
    tiny_engine.map_memo.clear()
    fresh = attention.attention_map(tiny_engine, run.cache, hidden, 1, 3, max_size=512)
    np.testing.assert_array_equal(kept, fresh.weights)

    log.clear()  # a kind that took long on this run: a quick answer (a guess) guesses on
    worker.submit(
        "attention_map", ("hit",), lambda _bench: None, (lambda _bench: log.append("next"),)
    )
    worker.serve()
    qtbot.waitUntil(lambda: log == ["next"], timeout=5000)
    worker.submit("attention_map", ("slow",), slow, (lambda _bench: log.append("guess"),))
    worker.serve()
    worker.run(
        RunRequest(2, "the cat", False, GREEDY, RunConfig(max_new_tokens=1))
    )  # queued before it
    qtbot.wait(50)
    assert log == ["next"] and worker.queue.ahead == []
    worker.submit(
        "attention_map", ("quick",), lambda _bench: None, (lambda _bench: log.append("guess"),)
    )
    worker.serve()  # a new run: nothing of this kind took long yet
    qtbot.wait(50)
    assert log == ["next"]


def test_the_gui_thread_keeps_the_models_thread_count_whatever_the_worker_serves(
    qtbot, monkeypatch
):
    """A thread keeps the torch thread count of the moment it first ran torch: one that first
    runs it while the worker serves on every core would use every core for good, beside the
    model. The window fixes its own count when a model has loaded (before any analysis)."""
    import os
    import threading

    import torch

    from llm_lens.core import runtime
    from llm_lens.desktop.state.controller import Controller

    monkeypatch.delenv("LLM_LENS_THREADS", raising=False)
    model = runtime.default_threads()
    holding, release = threading.Event(), threading.Event()

    def serving() -> None:  # the worker, serving an analysis on every core
        with runtime.every_core():
            holding.set()
            release.wait()

    def first_torch(pin: bool, out: list[int], ran: threading.Event) -> None:  # new to torch
        if pin:
            runtime.configure_threads()
        torch.randn(49152).softmax(-1)  # e.g. the Sampling pane's stages
        ran.set()
        release.wait()
        out.append(torch.get_num_threads())

    counts: dict[bool, list[int]] = {False: [], True: []}
    worker = threading.Thread(target=serving)
    worker.start()
    holding.wait()
    threads = []
    for pin in (False, True):  # one after the other: a pin sets torch's count for new threads
        ran = threading.Event()
        threads.append(threading.Thread(target=first_torch, args=(pin, counts[pin], ran)))
        threads[-1].start()
        ran.wait()
    release.set()
    for t in (worker, *threads):
        t.join()
    assert counts[False] == [os.cpu_count()] != [model]  # the hazard is real here
    assert counts[True] == [model]

    pinned: list[str] = []
    configure = runtime.configure_threads

    def spy(*args):
        pinned.append(threading.current_thread().name)
        return configure(*args)

    monkeypatch.setattr(runtime, "configure_threads", spy)
    ctl = Controller()
    try:
        with qtbot.waitSignal(ctl.sig_model_loaded, timeout=120_000):
            ctl.request_load()
        assert threading.current_thread().name in pinned
    finally:
        ctl.shutdown()


def test_a_run_the_history_lets_go_is_freed_on_the_model_thread(qtbot, tiny_engine, monkeypatch):
    """The window's hold on a run the history let go is the last one: dropped on the GUI thread,
    its arrays (half a gigabyte at the full context) were freed there, and the window stood
    still for it at the run's end. The model thread frees them instead."""
    import threading
    import weakref

    from llm_lens.core.runs import history
    from llm_lens.desktop.state.controller import Controller

    monkeypatch.setattr(history, "MAX_ROOTS", 1)  # each run lets the one before go
    ctl = Controller()
    ctl.worker.workbench.engine = tiny_engine
    ctl.use_model(tiny_engine.info)
    try:
        with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
            ctl.request_run("the cat sat on the mat", False, GREEDY, 3)
        qtbot.waitUntil(lambda: ctl.run_id in ctl.compare.shown, timeout=5000)
        first = ctl.run_id
        freed_on: list[str] = []
        logits = ctl.compare.shown[first].steps[-1].logits
        weakref.finalize(logits, lambda: freed_on.append(threading.current_thread().name))
        del logits
        with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
            ctl.request_run("a dog ran in the park", False, GREEDY, 3)
        qtbot.waitUntil(lambda: first not in ctl.compare.shown and bool(freed_on), timeout=5000)
        assert freed_on != [threading.main_thread().name]
        assert ctl.compare.shown.keys() == {ctl.run_id}
    finally:
        ctl.shutdown()


def test_what_a_runs_end_imports_on_the_gui_thread_was_imported_with_the_model():
    """Each run's end autosaves from the GUI thread (``SessionController.request_save``); the
    modules it imports come in when the worker loads a model, so the first run's end does not
    hold the window while they load. Checked in a fresh interpreter, on the function's own
    import statements."""
    import ast
    import inspect
    import subprocess
    import sys
    import textwrap

    from llm_lens.desktop.state.session_controller import SessionController

    tree = ast.parse(textwrap.dedent(inspect.getsource(SessionController.request_save)))
    lazy = sorted({n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)})
    assert any(name.startswith("llm_lens.core.sessions") for name in lazy)
    script = textwrap.dedent(f"""
        import importlib, sys
        from llm_lens.desktop.model_thread.worker import _import_run_end
        _import_run_end()
        before = set(sys.modules)
        for name in {lazy!r}:
            importlib.import_module(name)
        print(sorted(set(sys.modules) - before))
        """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    new = ast.literal_eval(out.stdout)  # module names
    ours = [name for name in new if name.startswith("llm_lens")]
    assert not new, f"{len(new)} modules imported at the run's end, ours: {ours}"


@pytest.mark.slow
def test_the_maps_beside_an_asked_map_are_computed_ahead(qtbot, ran, monkeypatch):
    """After one head's map of layer 5 (taking long enough: here any time; one head's alone, as
    for a long prompt), the worker computes the maps a spin box's step away while idle, into
    the model's memo: layers 6 and 4, heads 3 and 1. Asking for one of them then runs no
    attention module and gives what a fresh computation gives."""
    from llm_lens.core import attention
    from llm_lens.core.attention import prompt_maps
    from llm_lens.core.runs import budget

    monkeypatch.setattr(budget, "AHEAD_AFTER_MS", 0.0)
    monkeypatch.setattr(prompt_maps, "EVERY_HEAD_SCORES", 0)
    engine = ran.worker.workbench.engine
    wait_result(qtbot, ran, "attention_map", layer=5, head=2, max_size=512)
    guessed = {(6, 2), (5, 3), (4, 2), (5, 1)}
    qtbot.waitUntil(lambda: guessed <= set(engine.map_memo.get("maps", {})), timeout=30_000)
    calls: list[int] = []
    hooks = [engine.anatomy.attn[n].register_forward_pre_hook(lambda *_a: calls.append(1))
             for n in (4, 5, 6)]  # fmt: skip
    try:
        got = wait_result(qtbot, ran, "attention_map", layer=6, head=2, max_size=512)
        other = wait_result(qtbot, ran, "attention_map", layer=5, head=3, max_size=512)
    finally:
        for hook in hooks:
            hook.remove()
    assert calls == []
    run = ran.worker.workbench.store.runs[ran.run_id]
    for amap, (layer, head) in ((got, (6, 2)), (other, (5, 3))):
        engine.map_memo.clear()
        fresh = attention.attention_map(engine, run.cache, run.prefill.hidden, layer, head, 512)
        np.testing.assert_array_equal(amap.weights, fresh.weights)
