"""The analysis requests (``controller.analyses``): what is cached, what is asked of the model
thread, and jobs that hold the run they were asked for, not the controller."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from llm_lens.desktop.state import analyses as analyses_module
from llm_lens.desktop.state.shown import Shown


@pytest.fixture
def asking(qtbot, tiny_engine, monkeypatch):
    """A controller with the tiny model's info and run 5 shown; what it submits is recorded
    (``submitted``), nothing runs on the worker."""
    from llm_lens.desktop.state.controller import Controller

    ctl = Controller()
    ctl.use_model(tiny_engine.info)
    ctl.show_state(replace(ctl.shown, run_id=5))
    submitted: list[tuple[str, tuple, object, tuple]] = []
    monkeypatch.setattr(
        ctl.worker,
        "submit",
        lambda kind, key, job, ahead=(): submitted.append((kind, key, job, ahead)),
    )
    monkeypatch.setattr(ctl.link, "serve", lambda: None)
    ctl.submitted = submitted
    yield ctl
    ctl.shutdown()


def test_a_request_is_asked_once_then_answered_from_the_cache(qtbot, asking):
    ctl = asking
    assert ctl.request_analysis("lens", step=2) is None
    assert ctl.request_analysis("lens", step=2) is None  # asked already: not submitted again
    assert [(kind, key) for kind, key, _, _ in ctl.submitted] == [
        ("lens", ("lens", 5, ("step", 2)))
    ]
    key = ctl.submitted[0][1]
    with qtbot.waitSignal(ctl.sig_result) as blocker:
        ctl.worker.sig_result.emit("lens", key, "the lens")
    assert blocker.args == ["lens", key, "the lens"]
    assert ctl.request_analysis("lens", step=2) == "the lens"
    assert ctl.cached_result("lens", 5, step=2) == "the lens"
    assert list(ctl.analyses.results("lens")) == [(key, "the lens")]
    assert len(ctl.submitted) == 1


def test_a_dropped_request_is_not_cached_and_may_be_asked_again(qtbot, asking):
    ctl = asking
    ctl.request_analysis("lens", step=1)
    with qtbot.assertNotEmitted(ctl.sig_result):
        ctl.worker.sig_result.emit("lens", ctl.submitted[0][1], None)  # superseded on the worker
    assert ctl.cached_result("lens", 5, step=1) is None
    ctl.request_analysis("lens", step=1)
    assert len(ctl.submitted) == 2


def test_a_new_run_keeps_only_the_model_wide_results_and_a_load_keeps_none(qtbot, asking):
    ctl, analyses = asking, asking.analyses
    weights = ctl.info.weights_id
    analyses.answered(("lens", 5, ("step", 0)), "lens of run 5")
    analyses.answered(("embedding_projection", weights), "projection")
    analyses.keep_model_wide()
    assert ctl.cached_result("lens", 5, step=0) is None
    assert ctl.cached_result("embedding_projection", weights) == "projection"
    ctl.request_analysis("embedding_projection")  # model-wide: scoped by the weights
    assert ctl.submitted == []  # answered from the cache
    analyses.forget()
    assert ctl.cached_result("embedding_projection", weights) is None


def test_the_cache_keeps_the_newest_results(asking):
    analyses = asking.analyses
    for step in range(analyses_module.CACHED + 3):
        analyses.answered(("lens", 5, ("step", step)), step)
    kept = [result for _, result in analyses.results("lens")]
    assert kept == list(range(3, analyses_module.CACHED + 3))


def test_a_job_computes_the_run_it_was_asked_for_after_another_is_shown(asking, monkeypatch):
    """Jobs capture values: by the time one runs on the model thread the controller may show
    another run, and the job must still read the run (and flags) of its request."""
    ctl = asking
    computed = []
    monkeypatch.setattr(
        "llm_lens.core.loop.analyses.compute",
        lambda kind, engine, run, args: computed.append((kind, run, dict(args))) or "done",
    )
    ctl.request_analysis("attention_map", layer=0, head=1)
    _, _, job, ahead = ctl.submitted[0]
    assert ahead  # the likely next maps are guessed ahead
    ctl.show_state(replace(ctl.shown, run_id=9))  # another run is shown now
    bench = SimpleNamespace(engine="engine", store=SimpleNamespace(runs={5: "run 5", 9: "run 9"}))
    assert job(bench) == "done"
    assert computed == [("attention_map", "run 5", {"layer": 0, "head": 1})]
    assert ahead[0](bench) is None  # a guess for a run no longer shown is skipped
    assert len(computed) == 1


def test_a_reopened_run_answers_from_its_recording_or_says_why_not(asking):
    ctl = asking
    recorded = SimpleNamespace(get=lambda kind, args: "recorded lens" if kind == "lens" else None)
    other = replace(ctl.info, weights_id="other weights", name="Other-1B")
    ctl.show_state(Shown(run_id=6, recorded=recorded, info=other))
    assert ctl.request_analysis("lens", step=0) == "recorded lens"
    assert ctl.request_analysis("prompt_lens") is None and ctl.submitted == []
    assert ctl.waiting_text("prompt lens", "computing…") == (
        "the prompt lens is not in this session file: load Other-1B to compute it"
    )
    ctl.show_state(Shown(run_id=6, recorded=recorded, info=ctl.model_info))  # its model is loaded
    assert ctl.waiting_text("prompt lens", "computing…") == "computing…"
    assert ctl.request_analysis("prompt_lens") is None
    assert [key for _, key, _, _ in ctl.submitted] == [("prompt_lens", 6)]
