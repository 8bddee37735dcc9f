"""The What-if list (controller.whatif) on the tiny random Llama: what the next run is made under,
one edit per place, switches; the run request carries them as data and the worker's run applies
them (its tokens equal core's intervened run); the clean run is remembered for comparison; a
saved intervened run reopens marked, with its interventions; a branch of it keeps them."""

from __future__ import annotations

import numpy as np

from llm_lens.core.interventions import BlockEdit, Forget, HeadEdit
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from llm_lens.core.sessions.read import load_session
from llm_lens.desktop.state.whatif import block_changes, describe, head_changes, mark_text
from tests.desktop.state.conftest import run

TEXT = "the cat sat on the mat"


def test_one_edit_per_place_and_switches(tiny_ctl):
    whatif = tiny_ctl.whatif
    whatif.add(HeadEdit(1, 2, "scale", 0.0))
    whatif.add(Forget(3))
    whatif.add(HeadEdit(1, 2, "scale", 0.5))  # replaces the first edit of that head
    assert whatif.active() == (Forget(3), HeadEdit(1, 2, "scale", 0.5))
    whatif.switch(0, False)
    assert whatif.active() == (HeadEdit(1, 2, "scale", 0.5),) and len(whatif.entries) == 2
    whatif.remove(1)
    assert whatif.active() == () and len(whatif.entries) == 1
    assert [describe(i) for i in head_changes(7, 4)] == [
        "head 7.4 = 0", "head 7.4 × 0.5", "head 7.4 × 2", "head 7.4 = prompt mean"
    ]  # fmt: skip
    assert describe(block_changes(3)[1]) == "MLP 3 = 0"
    assert mark_text((HeadEdit(7, 4), Forget(12))) == "intervened: head 7.4 = 0, forget token 12"
    assert mark_text(()) == ""


def test_the_run_carries_them_and_equals_cores_intervened_run(qtbot, tiny_ctl, tiny_engine):
    ctl = tiny_ctl
    run(qtbot, ctl, TEXT, 4)
    clean = ctl.steps
    ctl.whatif.add(HeadEdit(9, 0))  # the tiny model has 2 layers: the run is refused
    with qtbot.waitSignal(ctl.sig_error, timeout=30_000) as error:
        ctl.request_run(TEXT, False, GREEDY, 4)
    assert "no layer 9" in error.args[0]
    assert ctl.interventions == () and ctl.steps == clean  # the clean run, unmarked, stays
    ctl.whatif.remove(0)
    changes = (HeadEdit(1, 0, "scale", 0.0), BlockEdit(0, "mlp", 0.5), Forget(2))
    for item in changes:
        ctl.whatif.add(item)
    run(qtbot, ctl, TEXT, 4)
    assert ctl.interventions == changes
    assert ctl.summary.extra["interventions"] == [i.to_dict() for i in changes]
    ref = tiny_engine.start(tiny_engine.tokenize(TEXT, chat=False), GREEDY,
                            RunConfig(max_new_tokens=4), interventions=changes)  # fmt: skip
    ref.run_all()
    assert [s.token.id for s in ctl.steps] == [s.token.id for s in ref.steps]
    np.testing.assert_allclose(ctl.steps[0].logits, ref.steps[0].logits, atol=1e-5)
    kept = ctl.whatif.clean_step(ctl.steps[0])  # the same context, read clean
    assert kept.token == clean[0].token and kept.logits is not clean[0].logits
    np.testing.assert_array_equal(kept.logits, clean[0].logits)
    assert ctl.whatif.clean_step(ctl.steps[-1]) is None or ctl.steps[-1].context_ids.tolist() == (
        clean[-1].context_ids.tolist()
    )  # a later step only where the clean run read the same tokens
    assert np.abs(clean[0].logits - ctl.steps[0].logits).max() > 1e-3


def test_a_saved_intervened_run_reopens_marked(qtbot, tiny_ctl, tmp_path):
    ctl = tiny_ctl
    changes = (HeadEdit(0, 1, "mean"), Forget(1))
    for item in changes:
        ctl.whatif.add(item)
    run(qtbot, ctl, TEXT, 3)
    tokens = [s.token.id for s in ctl.steps]
    path = tmp_path / "whatif.llmlens"
    with qtbot.waitSignal(ctl.sig_saved, timeout=60_000):
        ctl.sessions.request_save(str(path), with_views=True)
    assert load_session(path).runs[0].interventions == changes
    ctl.whatif.clear()
    run(qtbot, ctl, TEXT, 3)  # a clean run shown meanwhile
    assert ctl.interventions == ()
    with qtbot.waitSignal(ctl.sig_session_changed, timeout=60_000):
        ctl.sessions.request_open(str(path))
    qtbot.waitUntil(lambda: ctl.recorded is not None, timeout=30_000)
    assert ctl.interventions == changes
    assert [s.token.id for s in ctl.steps] == tokens
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        ctl.compare.request_continue(2)  # revived under them, then continued
    qtbot.waitUntil(lambda: not ctl.busy, timeout=30_000)
    assert ctl.interventions == changes and len(ctl.steps) == 5
    continued = [s.token.id for s in ctl.steps]
    for item in changes:
        ctl.whatif.add(item)
    run(qtbot, ctl, TEXT, 5)  # a fresh run of five under the same changes
    assert [s.token.id for s in ctl.steps] == continued
