"""Whether the model thread is busy, and whether a new run waits for the panes to clear, are
the controller's to change: read-only to everyone else, changed by its methods and its
worker's events."""

from __future__ import annotations

from dataclasses import replace

import pytest


@pytest.fixture
def bare(qtbot):
    from llm_lens.desktop.state.controller import Controller

    ctl = Controller()
    yield ctl
    ctl.shutdown()


def test_busy_and_preparing_cannot_be_assigned(bare):
    for name in ("busy", "preparing"):
        with pytest.raises(AttributeError):
            setattr(bare, name, True)
    assert not bare.busy and not bare.preparing


def test_set_busy_announces_each_change_once(qtbot, bare):
    with qtbot.waitSignal(bare.sig_busy_changed) as blocker:
        bare.set_busy(True)
    assert blocker.args == [True] and bare.busy
    with qtbot.assertNotEmitted(bare.sig_busy_changed):
        bare.set_busy(True)
    with qtbot.waitSignal(bare.sig_busy_changed) as blocker:
        bare.set_busy(False)
    assert blocker.args == [False] and not bare.busy


def test_a_run_prepares_until_the_panes_have_cleared(qtbot, bare):
    """A run that starts makes the panes clear while its prefill waits (they see ``preparing``
    as they clear); once no pane waits to render, the worker is told to go on."""
    bare.show_state(replace(bare.shown, run_id=7))
    bare.set_busy(True)
    panes_ready = bare.worker.flags.panes_ready
    panes_ready.clear()
    seen: list[tuple[object, bool, bool]] = []
    bare.sig_run_started.connect(lambda prompt: seen.append((prompt, bare.preparing, bare.busy)))
    bare.worker.sig_run_started.emit(7, "prompt")  # delivered directly here
    assert seen == [("prompt", True, True)] and bare.prompt == "prompt"
    assert not bare.preparing and panes_ready.is_set() and bare.busy  # no pane to wait for


def test_a_superseded_start_is_dropped_and_an_ended_run_prepares_no_more(qtbot, bare):
    bare.show_state(replace(bare.shown, run_id=7))
    panes_ready = bare.worker.flags.panes_ready
    panes_ready.clear()
    with qtbot.assertNotEmitted(bare.sig_run_started):
        bare.worker.sig_run_started.emit(6, "old prompt")
    assert not bare.preparing and bare.prompt is None
    bare.set_busy(True)
    bare.sig_run_started.connect(lambda _prompt: bare.set_busy(False))  # it ends at once
    bare.worker.sig_run_started.emit(7, "prompt")
    assert not bare.preparing and not bare.busy
    assert not panes_ready.is_set()  # an ended run's prefill is not waited for
