"""A controller whose worker runs the tiny random Llama (no model load), for the state tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def tiny_ctl(qtbot, tiny_engine):
    """A controller on the tiny random Llama; its worker thread stopped afterwards."""
    from llm_lens.desktop.state.controller import Controller

    ctl = Controller()
    ctl.worker.workbench.engine = tiny_engine
    ctl.use_model(tiny_engine.info)
    yield ctl
    ctl.shutdown()


def run(qtbot, ctl, text: str = "the cat sat on the mat", tokens: int = 3) -> None:
    """A greedy raw run of ``tokens`` tokens, waited for."""
    from llm_lens.core.sampling import GREEDY

    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        ctl.request_run(text, False, GREEDY, tokens)
