"""desktop.state.gui_gc: while any collector lives, automatic collection is off and the GUI
thread collects by generation thresholds; the last one to stop gives it back."""

from __future__ import annotations

import gc

from llm_lens.desktop.state import gui_gc
from llm_lens.desktop.state.gui_gc import GuiThreadCollector


def test_collection_is_off_while_a_collector_lives_and_back_after_the_last(qtbot):
    users = gui_gc._users
    first, second = GuiThreadCollector(), GuiThreadCollector()
    try:
        assert not gc.isenabled() and gui_gc._users == users + 2
        first.stop()
        first.stop()  # twice: counted once
        assert gui_gc._users == users + 1 and not gc.isenabled()
    finally:
        first.stop()
        second.stop()
    assert gui_gc._users == users
    if users == 0:
        assert gc.isenabled() == gui_gc._was_enabled


def test_check_collects_a_generation_past_its_threshold(qtbot):
    collector = GuiThreadCollector()
    try:
        collector.threshold = (10, 10**9, 10**9)
        junk = [[] for _ in range(100)]  # 100 young objects, past the threshold of 10
        assert gc.get_count()[0] > 10
        collector.check()
        assert gc.get_count()[0] < 10  # generation 0 was collected
        collector.threshold = (10**9, 10**9, 10**9)
        junk += [[] for _ in range(100)]
        before = gc.get_count()[0]
        collector.check()  # below every threshold: nothing collected
        assert gc.get_count()[0] >= before > 10
        del junk
    finally:
        collector.stop()


def test_settle_freezes_what_survives_and_the_last_stop_unfreezes(qtbot):
    users = gui_gc._users
    collector = GuiThreadCollector()
    try:
        collector.settle()
        assert gc.get_freeze_count() > 0
    finally:
        collector.stop()
    if users == 0:
        assert gc.get_freeze_count() == 0
