"""Logits and Sampling panes on a real run: bar heights, the chosen token, stages, export."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.desktop.panes.helpers import check_exports, show

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")


def test_logits_and_sampling_panes(qtbot, ran, tmp_path):
    import torch

    from llm_lens.core.records import TokenInfo
    from llm_lens.core.sampling import SamplingParams, restage, run_stages
    from llm_lens.desktop.panes.logits import CHOSEN_BRUSH, LogitsPane
    from llm_lens.desktop.panes.sampling import SamplingPane

    ran.request_select(1)
    step = ran.current_step()
    logits_pane = show(qtbot, LogitsPane(ran))
    bars = logits_pane.bars.opts
    assert np.allclose(bars["width"], step.top_probs[:20])
    assert logits_pane.chosen_row == step.rank == 0  # greedy: the top token
    assert bars["brushes"][0] is CHOSEN_BRUSH and bars["brushes"][1] is not CHOSEN_BRUSH
    assert f"entropy = {step.entropy:.3f} nats" in logits_pane.info.text()

    # a record whose chosen token sits at rank 4, then one outside the top 20
    def chosen_at(rank: int):
        tid = int(step.top_ids[rank])
        return dataclasses.replace(
            step,
            token=TokenInfo(tid, step.top_texts[rank], b"x"),
            rank=rank,
            prob=float(step.top_probs[rank]),
        )

    logits_pane.render(chosen_at(3))
    assert logits_pane.chosen_row == 3 and logits_pane.bars.opts["brushes"][3] is CHOSEN_BRUSH
    logits_pane.render(chosen_at(30))
    assert logits_pane.chosen_row is None
    assert "rank 31 (outside the top 20)" in logits_pane.info.text()
    assert len(logits_pane.csv_table()[1]) == 21
    logits_pane.log_scale.setChecked(True)
    opts = logits_pane.bars.opts
    assert np.allclose(opts["x0"] + opts["width"], np.log10(step.top_probs[:20]), atol=1e-6)
    logits_pane.render(chosen_at(30))
    rows = check_exports(logits_pane, tmp_path, 21, svg=True)
    assert rows[0][1] == str(int(step.top_ids[0])) and rows[-1][0] == "31"

    pane = show(qtbot, SamplingPane(ran))
    pane.controls.temp_slider.setValue(50)
    pane.controls.top_k.setValue(5)
    params = SamplingParams(temperature=0.5, top_k=5, top_p=0.95)
    assert ran.params == params
    expected = run_stages(torch.tensor(step.logits), torch.tensor(step.context_ids)[None], params)
    summary = restage(step.logits.copy(), step.context_ids.copy(), params)
    assert [v.name for v in pane.views] == ["raw", "temperature", "top_k", "top_p"]
    assert pane._placed == ("raw", "temperature", "top_k", "top_p")
    pane.clear()  # as a run starts: the settings' stages stay placed (no relayout at its end)
    assert pane._placed == ("raw", "temperature", "top_k", "top_p")
    assert not pane.bars["top_p"].opts["width"].any()
    pane.render(step)
    ids = torch.from_numpy(step.top_ids[:15].copy())
    for view, stage, summ in zip(pane.views, expected, summary, strict=True):
        assert np.allclose(pane.bars[view.name].opts["width"], stage.probs[0, ids], atol=1e-7)
        assert (view.kept, view.removed_mass) == (summ.kept, pytest.approx(summ.removed_mass))
    assert pane.views[2].kept == 5
    assert np.count_nonzero(pane.bars["top_k"].opts["width"]) == 5

    # an invalid setting is shown inline and not sent
    pane.controls.top_p.setValue(0.0)
    assert pane.error.isVisibleTo(pane) and "top-p" in pane.error.text()
    assert ran.params == params
    pane.controls.top_p.setValue(0.9)
    assert not pane.error.isVisibleTo(pane) and ran.params.top_p == pytest.approx(0.9)

    # settings changed elsewhere are reflected without echoing back
    sent: list[object] = []
    ran.sig_params_changed.connect(sent.append)
    ran.request_params(SamplingParams(temperature=1.3, top_k=7, top_p=1.0, seed=None))
    assert pane.controls.temp_slider.value() == 130 and pane.controls.top_k.value() == 7
    assert pane.controls.seed.text() == "random" and len(sent) == 1
    pane.render(step)
    assert [v.name for v in pane.views] == ["raw", "temperature", "top_k"]
    rows = check_exports(pane, tmp_path, 3 * 15, svg=True)
    assert rows[-1][:3] == ["top_k", "15", str(int(step.top_ids[14]))]
