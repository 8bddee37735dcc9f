"""The selftest's What-if check on the bundled model's window: after a clean run no pane marks
it and every pane's mark is missing when asked for; after the selftest's intervened run (a
forgotten first token, a halved head) every pane marks it; a pane whose mark stays hidden is
named."""

from __future__ import annotations

from typing import Any

from llm_lens.core.interventions import Forget, HeadEdit
from llm_lens.core.sampling import GREEDY
from llm_lens.desktop.startup.whatif_check import (
    MARKS,
    first_attention_layer,
    mark_problem,
    pane_marks,
    selftest_changes,
)
from tests.desktop.conftest import open_window

PROMPT = "The capital of France is"


def _run(qtbot: Any, win: Any, tokens: int) -> None:
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        win.controller.request_run(PROMPT, False, GREEDY, tokens)
    win.controller.request_select(0)


def _settled(qtbot: Any, win: Any) -> str:
    """The intervened check once the analyses a mark needs have come (at most 30 s)."""
    qtbot.waitUntil(lambda: not mark_problem(win, intervened=True), timeout=30_000)
    return mark_problem(win, intervened=True)


def test_every_pane_marks_the_intervened_run_and_not_the_clean_one(qtbot, tmp_path, monkeypatch):
    win = open_window(qtbot, tmp_path, monkeypatch)
    try:
        ctl = win.controller
        _run(qtbot, win, 1)
        assert mark_problem(win, intervened=False) == ""
        assert set(pane_marks(win)) == set(MARKS)  # the window has every pane the check reads
        missing = mark_problem(win, intervened=True)  # all but Attention (no head changed)
        assert missing == "panes that do not mark the intervened run: " + ", ".join(
            sorted(set(MARKS) - {"Attention"})
        )
        changes = selftest_changes(ctl.model_info)
        assert changes == [Forget(0), HeadEdit(0, 0, "scale", 0.5)]
        for change in changes:
            ctl.whatif.add(change)
        _run(qtbot, win, 3)
        assert _settled(qtbot, win) == ""
        assert mark_problem(win, intervened=False).startswith(
            "panes that mark the clean run as intervened: Attention, Embeddings, Experts"
        )
        timing = win.panes["Timing"]
        monkeypatch.setattr(timing.whatif_mark, "show_run", lambda *_a, **_k: None)
        timing.whatif_mark.setVisible(False)
        assert mark_problem(win, intervened=True) == (
            "panes that do not mark the intervened run: Timing"
        )
    finally:
        win.close()


def test_a_model_without_attention_changes_no_head() -> None:
    from types import SimpleNamespace

    mamba = SimpleNamespace(num_layers=2, has_attention=lambda _n: False)
    assert first_attention_layer(mamba) is None
    assert selftest_changes(mamba) == [Forget(0)]
    hybrid = SimpleNamespace(num_layers=3, has_attention=lambda n: n == 1)
    assert selftest_changes(hybrid) == [Forget(0), HeadEdit(1, 0, "scale", 0.5)]
