"""What is shown is one frozen value: readers cannot change it, the controller's methods replace
it, and a step arriving stays cheap at thousands of steps."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from types import SimpleNamespace

import pytest

from llm_lens.core.sampling import GREEDY
from llm_lens.desktop.state.shown import FIELDS, Shown


@pytest.fixture(scope="module")
def tiny_run(tiny_engine):
    """A finished 3-step greedy run of the tiny random Llama."""
    from llm_lens.core.loop.engine import RunConfig

    run = tiny_engine.start(tiny_engine.tokenize("the cat sat", chat=False), GREEDY, RunConfig(3))
    run.run_all()
    return run


class _Prompt(list):
    """A stand-in ``PromptTokens``: its tokens, and its length."""

    @property
    def tokens(self):
        return list(self)


def _token(i: int) -> SimpleNamespace:
    return SimpleNamespace(id=100 + i, text=f"t{i}")


def _steps(n: int) -> tuple[SimpleNamespace, ...]:
    return tuple(SimpleNamespace(index=i, token=_token(10 + i)) for i in range(n))


def test_the_value_is_frozen_and_its_changes_are_new_values():
    shown = Shown(steps=_steps(2), selected=1, token=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        shown.selected = 0
    with pytest.raises(AttributeError):
        shown.steps.append(None)  # a tuple: no reader can grow it
    grown = shown.with_step("record")
    assert grown.steps[-1] == "record" and len(grown.steps) == 3 and len(shown.steps) == 2
    assert shown.current_step() is shown.steps[1] and Shown().current_step() is None
    blank = shown.cleared(dirty=True)
    assert (blank.steps, blank.selected, blank.token, blank.prompt, blank.dirty) == (
        (), -1, -1, None, True
    )  # fmt: skip
    assert shown.selected == 1 and shown.token == 3 and not shown.dirty


def test_a_reader_cannot_assign_what_is_shown(bare):
    for name in FIELDS:
        with pytest.raises(AttributeError):
            setattr(bare, name, getattr(bare, name))
    for name in ("params", "model_info", "shown"):
        with pytest.raises(AttributeError):
            setattr(bare, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        bare.shown.selected = 2
    with pytest.raises(AttributeError):
        bare.steps.append(None)
    assert bare.shown == Shown(run_params=bare.params)  # nothing above got through


def test_the_properties_read_the_shown_value(bare):
    shown = Shown(prompt=_Prompt([_token(0)]), steps=_steps(3), selected=2, token=1, run_id=9)
    bare.show_state(shown)
    assert bare.shown is shown
    for name in FIELDS:
        assert getattr(bare, name) is getattr(shown, name)
    assert bare.current_step() is shown.steps[2]


def test_selecting_a_step_replaces_the_value_and_tells_the_panes(qtbot, bare):
    bare.show_state(Shown(steps=_steps(4), selected=3))
    held = bare.shown
    with qtbot.waitSignal(bare.sig_selection_changed) as blocker:
        bare.request_select(1)
    assert blocker.args == [1] and bare.selected == 1 and not bare.follow_live
    assert held.selected == 3 and held.follow_live  # a value a reader kept stays as it was
    with qtbot.waitSignal(bare.sig_selection_changed) as blocker:
        bare.request_select(99)  # clamped to the newest step, which follows the live run
    assert blocker.args == [3] and bare.selected == 3 and bare.follow_live
    with qtbot.assertNotEmitted(bare.sig_selection_changed):
        bare.request_select(3)


def test_selecting_a_token_replaces_the_value_and_may_select_its_step(qtbot, bare):
    prompt = _Prompt([_token(0), _token(1)])
    bare.show_state(Shown(prompt=prompt, steps=_steps(3), selected=0, follow_live=False))
    with qtbot.waitSignal(bare.sig_token_selected) as blocker:
        bare.request_select_token(len(prompt) + 2, with_step=True)
    assert blocker.args == [4] and bare.token == 4 and bare.selected == 2
    with qtbot.waitSignal(bare.sig_token_selected) as blocker:
        bare.request_select_token(1, with_step=True)  # a prompt token: no step to select
    assert blocker.args == [1] and bare.token == 1 and bare.selected == 2
    with qtbot.waitSignal(bare.sig_token_selected) as blocker:
        bare.request_select_token(99)  # past the end: nothing selected
    assert blocker.args == [-1] and bare.token == -1
    with qtbot.assertNotEmitted(bare.sig_token_selected):
        bare.request_select_token(-5)


def test_steps_arrive_as_new_values(qtbot, bare):
    """A run can have thousands of steps: each arrival makes a new value holding the same
    records (a value a reader kept does not grow); a superseded run's record is dropped."""
    bare.show_state(Shown(run_id=7))
    held = bare.shown
    records = _steps(4200)
    for record in records[:4000]:
        bare.worker.sig_step.emit(7, record)  # the worker's signal, delivered directly here
    bare.worker.sig_step.emit(6, records[0])  # a superseded run's late record: dropped
    assert len(bare.steps) == 4000 and bare.steps[-1] is records[3999] and held.steps == ()
    for record in records[4000:]:
        bare.worker.sig_step.emit(7, record)
    assert len(bare.steps) == 4200 and bare.steps[4000:] == records[4000:]
    assert bare.worker.flags.shown_run_id == 7  # the model thread knows the run shown
    qtbot.waitUntil(lambda: bare.selected == 4199, timeout=2000)  # the flush followed it


def test_a_finished_run_shown_replaces_the_whole_value(qtbot, bare, tiny_run):
    from llm_lens.core.records import RunSummary

    bare.show_state(Shown(session="file", session_path="/a.llmlens", token=3, dirty=False))
    held = bare.shown
    summary = RunSummary.of(5, tiny_run.prompt, tiny_run.steps, "length")
    with qtbot.waitSignal(bare.sig_run_finished):
        bare.show_run(5, tiny_run.prompt, tiny_run.prefill, tiny_run.steps, summary, GREEDY)
    shown = bare.shown
    assert shown is not held and held.session == "file" and held.steps == ()
    assert shown.steps == tuple(tiny_run.steps) and shown.prompt is tiny_run.prompt
    assert (shown.run_id, shown.summary, shown.run_params) == (5, summary, GREEDY)
    assert (shown.session, shown.session_path, shown.recorded, shown.token) == (None,) * 3 + (-1,)
    assert shown.dirty and shown.follow_live and shown.selected == len(tiny_run.steps) - 1


def test_a_recorded_run_shown_gets_a_fresh_id_and_its_model(qtbot, bare, tiny_engine, tiny_run):
    run = SimpleNamespace(
        prompt=tiny_run.prompt, prefill=tiny_run.prefill, steps=list(tiny_run.steps),
        finish_reason="length",
    )  # fmt: skip
    recorded = SimpleNamespace(run=run)
    bare.show_state(Shown(run_id=bare.new_run_id(), dirty=True, token=2))
    before = bare.run_id
    with qtbot.waitSignal(bare.sig_model_loaded) as blocker:
        bare.show_recorded("session", "/s.llmlens", recorded, 1, tiny_engine.info)
    assert blocker.args == [tiny_engine.info] and bare.info == tiny_engine.info
    assert bare.run_id > before and bare.summary.run_id == bare.run_id
    assert bare.summary.finish_reason == "length" and bare.steps == tuple(run.steps)
    assert (bare.session, bare.session_path, bare.session_index) == ("session", "/s.llmlens", 1)
    assert bare.recorded is recorded and not bare.dirty and bare.token == -1
    with qtbot.assertNotEmitted(bare.sig_model_loaded):  # the same model: no reload signal
        bare.show_recorded("session", "/s.llmlens", recorded, 0, tiny_engine.info)
    assert bare.session_index == 0


def test_saving_and_renumbering_replace_the_session(bare):
    bare.show_state(Shown(session="old", session_path=None, dirty=True, selected=1))
    bare.replace_session("renumbered")
    assert (bare.session, bare.session_path, bare.dirty) == ("renumbered", None, True)
    bare.mark_saved("saved", "/x.llmlens")
    assert (bare.session, bare.session_path, bare.dirty) == ("saved", "/x.llmlens", False)
    assert bare.selected == 1  # the rest of what is shown stays


def test_a_session_written_by_the_worker_marks_the_run_saved(qtbot, bare, tmp_path):
    path = str(tmp_path / "s.llmlens")
    bare.show_state(replace(bare.shown, dirty=True))
    with qtbot.waitSignal(bare.sig_saved) as blocker:
        bare.worker.sig_result.emit("save_session", ("save_session", path), (path, 12, "s"))
    assert blocker.args == [path, 12]
    assert (bare.session, bare.session_path, bare.dirty) == ("s", path, False)


def test_using_a_model_sets_the_loaded_and_shown_model_alone(qtbot, bare, tiny_engine):
    with qtbot.assertNotEmitted(bare.sig_model_loaded):
        bare.use_model(tiny_engine.info)
    assert bare.model_info is tiny_engine.info and bare.info is tiny_engine.info
    assert bare.model_matches()


def test_update_shown_is_the_one_writer_and_the_live_run_uses_it(qtbot, bare):
    """``update_shown`` replaces fields (or clears the run first); ``controller.live`` writes
    through it alone, never the controller's private members."""
    import inspect

    from llm_lens.desktop.state import live_run

    bare.show_state(Shown(steps=_steps(2), selected=1, token=3, run_id=4))
    held = bare.shown
    bare.update_shown(token=1, dirty=True)
    assert (bare.token, bare.dirty, bare.steps, held.token) == (1, True, held.steps, 3)
    bare.update_shown(clear=True, run_id=5)
    assert (bare.steps, bare.selected, bare.token, bare.run_id) == ((), -1, -1, 5)
    assert bare.worker.flags.shown_run_id == 5  # it passes the one setter
    source = inspect.getsource(live_run)
    assert "._replace(" not in source and "._shown" not in source
