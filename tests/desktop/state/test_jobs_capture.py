"""Jobs capture values, not the controller: every job the window hands the model thread
(analyses, saves, exports, opens, comparisons, beams, branches, continuations) holds no Qt object
of the GUI thread, so nothing it reads can change under it, and no GUI object's method runs on
the model thread."""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator

import pytest
from PySide6.QtCore import QObject

from llm_lens.core.sampling import GREEDY


def held(obj: object, seen: set[int] | None = None) -> Iterator[object]:
    """Everything ``obj`` (a job) holds when it runs: its closure cells and defaults, through
    nested functions, partials, bound methods and containers."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    inner: list[object] = []
    if isinstance(obj, types.FunctionType):
        inner += [cell.cell_contents for cell in obj.__closure__ or ()]
        inner += list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
    elif isinstance(obj, functools.partial):
        inner += [obj.func, *obj.args, *obj.keywords.values()]
    elif isinstance(obj, (types.MethodType, types.BuiltinMethodType)):
        inner.append(obj.__self__)
    elif isinstance(obj, (tuple, list, set, frozenset)):
        inner += list(obj)
    elif isinstance(obj, dict):
        inner += list(obj.values())
    for item in inner:
        if not isinstance(item, types.ModuleType):
            yield from held(item, seen)


def test_the_walk_finds_an_object_behind_a_bound_method_in_a_nested_closure():
    owner = QObject()

    def outer():
        call = owner.objectName

        def job(bench):
            return call()

        return functools.partial(job, bench=None)

    assert owner in list(held(outer()))


@pytest.fixture
def jobs(qtbot, tiny_engine, monkeypatch, tmp_path):
    """A controller showing a finished 3-step run of the tiny model; ``(kind, job)`` of every
    job it hands the worker are recorded instead of run."""
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.records import RunSummary
    from llm_lens.desktop.state.controller import Controller

    ctl = Controller()
    ctl.use_model(tiny_engine.info)
    run = tiny_engine.start(tiny_engine.tokenize("the cat sat", chat=False), GREEDY, RunConfig(3))
    run.run_all()
    summary = RunSummary.of(5, run.prompt, run.steps, "length")
    ctl.show_run(5, run.prompt, run.prefill, run.steps, summary, GREEDY)
    recorded: list[tuple[str, object]] = []

    def submit(kind, key, job, ahead=()):
        recorded.append((kind, job))
        recorded.extend((f"{kind} ahead", guess) for guess in ahead)

    monkeypatch.setattr(ctl.worker, "submit", submit)
    monkeypatch.setattr(ctl.link, "stream", lambda job_id, job: recorded.append(("stream", job)))
    monkeypatch.setattr(ctl.link, "serve", lambda: None)
    ctl.jobs = recorded
    yield ctl
    ctl.shutdown()


def test_no_job_holds_a_gui_object(jobs, tmp_path):
    ctl = jobs
    ctl.request_analysis("attention_map", layer=0, head=0)
    ctl.request_analysis("embedding_projection")
    ctl.sessions.request_save(str(tmp_path / "a.llmlens"))
    ctl.sessions.request_save(str(tmp_path / "b.llmlens"), with_views=False, everything=False)
    ctl.sessions.request_export("trace", str(tmp_path / "a.json"))
    ctl.sessions.request_export("report", str(tmp_path / "a.html"))
    ctl.sessions.request_open(str(tmp_path / "a.llmlens"))
    ctl.compare.request_compare("the cat", False, [GREEDY, GREEDY.with_(temperature=0.7)], 3)
    ctl.compare.request_beam("the cat", False, 2, 3)
    ctl.compare.request_continue(2)
    ctl.set_busy(False)  # the continuation streams nothing here
    ctl.compare.request_branch(1, int(ctl.steps[1].token.id) + 1, 2)
    kinds = [kind for kind, _ in ctl.jobs]
    for kind in ("attention_map", "attention_map ahead", "embedding_projection", "save_session",
                 "export", "open_session", "stream"):  # fmt: skip
        assert kind in kinds
    assert kinds.count("stream") == 4 and kinds.count("save_session") == 2
    for kind, job in ctl.jobs:
        gui = [type(o).__name__ for o in held(job) if isinstance(o, QObject)]
        assert not gui, f"a {kind} job holds {gui}"
