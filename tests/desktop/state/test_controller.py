"""desktop.state.controller: the window's requests become runs on the model thread, and the
shown run, step, token and settings change only through its methods, each with its signal."""

from __future__ import annotations

from llm_lens.core.sampling import GREEDY, SamplingParams
from tests.desktop.state.conftest import run


def test_a_run_without_a_model_is_a_message(qtbot, bare):
    errors: list[str] = []
    bare.sig_error.connect(errors.append)
    bare.request_run("hi", False, GREEDY, 3)
    assert errors == ["no model is loaded yet"] and bare.steps == ()


def test_a_run_streams_its_steps_and_ends_on_the_last(qtbot, tiny_ctl):
    started: list[object] = []
    tiny_ctl.sig_run_started.connect(started.append)
    run(qtbot, tiny_ctl, tokens=4)
    first = tiny_ctl.run_id
    assert len(started) == 1 and started[0].text == "the cat sat on the mat"
    assert [s.index for s in tiny_ctl.steps] == [0, 1, 2, 3] and tiny_ctl.steps[0].is_prefill
    assert tiny_ctl.prompt.text == "the cat sat on the mat"
    assert tiny_ctl.selected == 3 and not tiny_ctl.busy  # followed the run to its end
    assert tiny_ctl.current_step() is tiny_ctl.steps[3]
    run(qtbot, tiny_ctl, text="a dog", tokens=2)
    assert tiny_ctl.run_id > first and len(tiny_ctl.steps) == 2
    assert tiny_ctl.prompt.text == "a dog"


def test_selecting_a_step_is_clamped_and_signalled_once(qtbot, tiny_ctl):
    run(qtbot, tiny_ctl)
    selected: list[int] = []
    tiny_ctl.sig_selection_changed.connect(selected.append)
    tiny_ctl.request_select(1)
    tiny_ctl.request_select(1)  # no change: no signal
    tiny_ctl.request_select(99)
    tiny_ctl.request_select(-5)
    assert selected == [1, 2, 0] and tiny_ctl.selected == 0


def test_selecting_a_response_token_may_select_its_step(qtbot, tiny_ctl):
    run(qtbot, tiny_ctl)
    n = len(tiny_ctl.prompt)
    tokens: list[int] = []
    tiny_ctl.sig_token_selected.connect(tokens.append)
    tiny_ctl.request_select(0)
    tiny_ctl.request_select_token(n + 1, with_step=True)
    assert tiny_ctl.token == n + 1 and tiny_ctl.selected == 1
    tiny_ctl.request_select_token(2)  # a prompt token: the step stays
    tiny_ctl.request_select_token(10_000)  # no such token: none selected
    assert tokens == [n + 1, 2, -1] and tiny_ctl.selected == 1


def test_settings_changed_are_the_next_runs_and_signalled(qtbot, bare):
    sent: list[object] = []
    bare.sig_params_changed.connect(sent.append)
    params = SamplingParams(temperature=0.5, top_k=3, seed=1)
    bare.request_params(params)
    assert bare.params == params and sent == [params]
