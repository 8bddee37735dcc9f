"""While a run streams, the panes' work on the GUI thread is budgeted: renders are coalesced to
the scheduler's live rate, the scheduler rests between units to stay within its share of the
GUI thread, a pane behind another gets no render at all, and every pane renders the final step
once the run ends."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QTabWidget

from llm_lens.desktop.state import scheduler as sched

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")


class SlowPane(QObject):
    """What the scheduler uses of a pane; each unit takes ``cost`` seconds."""

    def __init__(self, controller: SimpleNamespace, cost: float = 0.0) -> None:
        super().__init__()
        self.controller = controller
        self.cost = cost
        self.units: list[tuple[float, float]] = []  # (start, end)

    def render_and_paint(self) -> None:
        t0 = time.monotonic()
        time.sleep(self.cost)
        self.units.append((t0, time.monotonic()))


def test_units_rest_to_stay_within_the_share_only_while_streaming(qtbot):
    ctl = SimpleNamespace(busy=True)
    scheduler = sched.RepaintScheduler(share=0.1)
    first, second = SlowPane(ctl, cost=0.02), SlowPane(ctl, cost=0.02)
    scheduler.request(first)
    scheduler.request(second)
    qtbot.waitUntil(lambda: bool(second.units), timeout=3000)
    spent = first.units[0][1] - first.units[0][0]
    rest = second.units[0][0] - first.units[0][1]
    assert rest >= 0.9 * spent * (1 / 0.1 - 1)  # 20 ms of work, then 180 ms of rest
    assert scheduler.units[0][1]  # recorded as a streaming unit

    ctl.busy = False  # the run ended: no rest
    scheduler.wake()
    first.units.clear()
    second.units.clear()
    scheduler.request(first)
    scheduler.request(second)
    qtbot.waitUntil(lambda: bool(second.units), timeout=3000)
    assert second.units[0][0] - first.units[0][1] < 0.1


def test_pane_work_while_streaming_stays_within_the_share(qtbot):
    ctl = SimpleNamespace(busy=True)
    scheduler = sched.RepaintScheduler(share=0.1)
    panes = [SlowPane(ctl, cost=0.01), SlowPane(ctl, cost=0.03)]
    for _ in range(80):  # a step every 10 ms
        for pane in panes:
            scheduler.request(pane)
        qtbot.wait(10)
    units = sorted(u for pane in panes for u in pane.units)
    assert len(units) >= 2
    spent = sum(b - a for a, b in units)
    assert spent <= 0.1 * (units[-1][0] - units[0][0]) + units[-1][1] - units[-1][0] + 0.01


def test_requests_while_streaming_are_coalesced_to_the_live_rate(qtbot):
    ctl = SimpleNamespace(busy=True)
    scheduler = sched.RepaintScheduler(share=1.0)  # only the live rate limits here
    pane = SlowPane(ctl)
    t0 = time.monotonic()
    for _ in range(50):  # a step every 10 ms, as fast tokens come
        scheduler.request(pane)
        qtbot.wait(10)
    streamed = time.monotonic() - t0
    assert 2 <= len(pane.units) <= streamed / (sched.LIVE_MS / 1e3) + 2 < 50
    starts = [s for s, _ in pane.units]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    # never early as a coarse timer is (up to 5 %, every time); a unit's own clock starts a
    # little after the scheduler's, later still when the machine is busy
    assert np.median(gaps) >= sched.LIVE_MS / 1e3 - 0.001
    assert min(gaps) >= sched.LIVE_MS / 1e3 - 0.010


def test_wake_renders_a_pane_waiting_for_its_live_slot_at_once(qtbot):
    ctl = SimpleNamespace(busy=True)
    scheduler = sched.RepaintScheduler(share=1.0)
    pane = SlowPane(ctl)
    scheduler.request(pane)
    qtbot.waitUntil(lambda: len(pane.units) == 1, timeout=2000)
    scheduler.request(pane)  # waits for its next live slot (150 ms)
    ctl.busy = False
    t0 = time.monotonic()
    scheduler.wake()
    qtbot.waitUntil(lambda: len(pane.units) == 2, timeout=2000)
    assert pane.units[1][0] - t0 < sched.LIVE_MS / 1e3


def test_a_stream_renders_few_steps_skips_hidden_panes_and_ends_on_the_final_step(qtbot, tiny_ctl):
    from llm_lens.core.sampling import GREEDY
    from llm_lens.desktop.panes.logits import LogitsPane
    from llm_lens.desktop.panes.timing import TimingPane

    ctl = tiny_ctl
    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    shown, behind = LogitsPane(ctl), TimingPane(ctl)
    tabs.addTab(shown, "shown")
    tabs.addTab(behind, "behind")
    tabs.resize(700, 450)
    tabs.show()
    qtbot.waitExposed(tabs)
    rendered: dict[str, list[tuple[int, bool]]] = {"shown": [], "behind": []}
    for name, pane in (("shown", shown), ("behind", behind)):
        original = pane.render

        def spy(step, original=original, name=name):
            rendered[name].append((-1 if step is None else step.index, ctl.busy))
            original(step)

        pane.render = spy
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        ctl.request_run("the cat sat on the mat", False, GREEDY, 48)
    final = len(ctl.steps) - 1
    assert final == 47
    qtbot.waitUntil(
        lambda: all(r and r[-1] == (final, False) for r in rendered.values()), timeout=5000
    )
    assert not [r for r in rendered["behind"] if r[1]]  # nothing while the run streamed
    live = [index for index, busy in rendered["shown"] if busy]
    assert len(live) < len(ctl.steps)  # coalesced: not a render per step
    assert live == sorted(live)  # the newest step each time, never an older one


def test_a_pane_behind_another_is_not_even_queued_while_streaming(qtbot, tiny_ctl):
    from llm_lens.desktop.panes.timing import TimingPane
    from llm_lens.desktop.state.scheduler import scheduler

    ctl = tiny_ctl
    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    front, behind = TimingPane(ctl), TimingPane(ctl)
    tabs.addTab(front, "front")
    tabs.addTab(behind, "behind")
    tabs.show()
    qtbot.waitExposed(tabs)
    ctl.set_busy(True)
    try:
        behind.schedule()
        front.schedule()
        assert id(behind) not in scheduler()._dirty and behind._deferred
        assert id(front) in scheduler()._dirty
    finally:
        ctl.set_busy(False)
    ctl.sig_busy_changed.emit(False)  # the run ended: it is queued and renders
    behind.render_times_ms.clear()
    qtbot.waitUntil(lambda: bool(behind.render_times_ms), timeout=2000)


def test_sampling_shows_the_runs_own_stages_while_streaming_and_its_settings_after(qtbot, ran):
    """No re-staging of the vocabulary on the GUI thread beside a streaming run: the pane shows
    the stages the loop recorded, says so, and re-samples with its settings when the run ends."""
    from llm_lens.desktop.panes.sampling import NOTE, NOTE_LIVE, SamplingPane

    pane = SamplingPane(ran)
    qtbot.addWidget(pane)
    assert pane.params != ran.run_params  # the default settings; the run was greedy
    step = ran.current_step()
    ran.set_busy(True)
    try:
        pane.render(step)
        assert pane.shown_params == ran.run_params and pane.note.text() == NOTE_LIVE
        assert [v.name for v in pane.views] == [s.name for s in step.stages]
    finally:
        ran.set_busy(False)
    pane.render(step)
    assert pane.shown_params == pane.params and pane.note.text() == NOTE
    assert [v.name for v in pane.views] == ["raw", *pane.params.active_stages()]


def test_the_rest_counts_the_gui_threads_work_outside_the_units(qtbot):
    """Work the GUI thread does between units (Qt's late paints, the response text) is charged
    to the budget: 60 ms of CPU spent between two cheap units lengthens the rest after the
    second to at least 60 ms / share."""
    ctl = SimpleNamespace(busy=True)
    scheduler = sched.RepaintScheduler(share=0.5)
    pane = SlowPane(ctl)
    scheduler.request(pane)
    qtbot.waitUntil(lambda: len(pane.units) == 1, timeout=2000)
    end = time.thread_time() + 0.06
    while time.thread_time() < end:  # CPU on the GUI thread, outside any unit
        pass
    scheduler.request(pane)
    qtbot.waitUntil(lambda: len(pane.units) == 2, timeout=2000)
    scheduler.request(pane)
    qtbot.waitUntil(lambda: len(pane.units) == 3, timeout=2000)
    assert pane.units[2][0] - pane.units[1][0] >= 0.06 / 0.5 - 0.005


def test_a_runs_prefill_starts_once_the_panes_have_cleared(qtbot, tiny_ctl, monkeypatch):
    """The panes clear for a new run at their normal rate while its prefill waits, so the
    GUI's work does not land inside the model's time to first token; then the run streams
    within the budget as before."""
    from PySide6.QtWidgets import QHBoxLayout, QWidget

    from llm_lens.core.sampling import GREEDY
    from llm_lens.desktop.panes.logits import LogitsPane
    from llm_lens.desktop.panes.timing import TimingPane

    ctl = tiny_ctl
    panes = [LogitsPane(ctl), TimingPane(ctl)]
    box = QWidget()
    qtbot.addWidget(box)
    layout = QHBoxLayout(box)
    for pane in panes:
        layout.addWidget(pane)
    box.resize(900, 400)
    box.show()
    qtbot.waitExposed(box)
    cleared: list[float] = []
    for pane in panes:
        original = pane.clear

        def spy(original=original):
            original()
            cleared.append(time.monotonic())

        pane.clear = spy
    from llm_lens.core.loop.engine import Run

    inner = Run.__iter__
    began: list[float] = []

    def iterate(run):
        began.append(time.monotonic())
        yield from inner(run)

    monkeypatch.setattr(Run, "__iter__", iterate)
    qtbot.wait(50)
    cleared.clear()
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        ctl.request_run("the cat sat on the mat", False, GREEDY, 4)
    assert len(cleared) >= 2 and began
    assert max(cleared) <= began[0]  # both panes cleared before the prefill began
    assert not ctl.preparing and ctl.worker.flags.panes_ready.is_set()
