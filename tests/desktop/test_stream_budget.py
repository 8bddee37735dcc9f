"""While a run streams, the panes' work on the GUI thread is budgeted: renders are coalesced to
the scheduler's live rate, the scheduler rests between units to stay within its share of the
GUI thread, a pane behind another gets no render at all, and every pane renders the final step
once the run ends."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QTabWidget

from llm_lens.desktop.panes import scheduler as sched

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


def test_a_pane_waits_for_its_share_of_the_budget_only_while_streaming(qtbot):
    ctl = SimpleNamespace(busy=True)
    scheduler = sched.RepaintScheduler(share=0.1)
    first, second = SlowPane(ctl, cost=0.02), SlowPane(ctl, cost=0.02)
    scheduler.request(first)
    scheduler.request(second)
    qtbot.waitUntil(lambda: bool(second.units), timeout=3000)
    spent = first.units[0][1] - first.units[0][0]
    assert second.units[0][0] - first.units[0][1] >= spent - 0.005  # no two units in a row
    scheduler.request(first)
    qtbot.waitUntil(lambda: len(first.units) == 2, timeout=3000)
    # two panes of 20 ms within 10 %: each renders at most every 2 × 20 / 0.1 = 400 ms
    assert first.units[1][0] - first.units[0][0] >= 0.9 * 2 * spent / 0.1
    assert scheduler.units[0][1]  # recorded as a streaming unit

    ctl.busy = False  # the run ended: the normal rate
    scheduler.wake()
    t0 = time.monotonic()
    scheduler.request(first)
    qtbot.waitUntil(lambda: len(first.units) == 3, timeout=3000)
    assert first.units[2][0] - t0 < 0.1


def test_while_streaming_a_cheap_pane_renders_more_often_than_a_costly_one(qtbot):
    ctl = SimpleNamespace(busy=True)
    scheduler = sched.RepaintScheduler(share=0.1)
    cheap, costly = SlowPane(ctl, cost=0.0), SlowPane(ctl, cost=0.03)
    for _ in range(80):  # a step every 10 ms
        scheduler.request(cheap)
        scheduler.request(costly)
        qtbot.wait(10)
    assert len(cheap.units) > 2 * len(costly.units) >= 2
    spent = sum(b - a for pane in (cheap, costly) for a, b in pane.units)
    first = min(a for pane in (cheap, costly) for a, _ in pane.units)
    last = max(b for pane in (cheap, costly) for _, b in pane.units)
    assert spent <= 0.1 * (last - first) + 0.03 + 0.01  # within the share, bar the last unit


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
    assert min(gaps) >= sched.LIVE_MS / 1e3 - 0.005


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


@pytest.fixture
def tiny_controller(qtbot, tiny_engine):
    """A controller whose worker runs the tiny random Llama (no model load)."""
    from llm_lens.desktop.controller import Controller

    ctl = Controller()
    ctl.worker.engine = tiny_engine
    ctl.info = ctl.model_info = tiny_engine.info
    yield ctl
    ctl.shutdown()


def test_a_stream_renders_few_steps_skips_hidden_panes_and_ends_on_the_final_step(
    qtbot, tiny_controller
):
    from llm_lens.core.sampling import GREEDY
    from llm_lens.desktop.panes.logits import LogitsPane
    from llm_lens.desktop.panes.timing import TimingPane

    ctl = tiny_controller
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


def test_a_pane_behind_another_is_not_even_queued_while_streaming(qtbot, tiny_controller):
    from llm_lens.desktop.panes.scheduler import scheduler
    from llm_lens.desktop.panes.timing import TimingPane

    ctl = tiny_controller
    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    front, behind = TimingPane(ctl), TimingPane(ctl)
    tabs.addTab(front, "front")
    tabs.addTab(behind, "behind")
    tabs.show()
    qtbot.waitExposed(tabs)
    ctl.busy = True
    try:
        behind.schedule()
        front.schedule()
        assert id(behind) not in scheduler()._dirty and behind._deferred
        assert id(front) in scheduler()._dirty
    finally:
        ctl.busy = False
    ctl.sig_busy_changed.emit(False)  # the run ended: it is queued and renders
    behind.render_times_ms.clear()
    qtbot.waitUntil(lambda: bool(behind.render_times_ms), timeout=2000)
