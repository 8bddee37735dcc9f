"""desktop.panes.kvcache: the KV cache pane plots the records' bytes and formula, on the real
model and on tiny random models of windowed families (a ``DynamicCache`` their forward filled)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from tests.core.kvcache.test_windows import FAMILIES, _config, _model, _steps
from tests.desktop.panes.helpers import check_exports, curve


@pytest.mark.slow
def test_kv_cache_plots_records_and_formula(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.kvcache import KVCachePane, human_bytes

    pane = KVCachePane(ran)
    qtbot.addWidget(pane)
    steps = ran.steps
    ran.request_select(1)
    pane.render(ran.current_step())

    tokens = np.array([s.kv.tokens for s in steps])
    measured = np.array([s.kv.bytes_total for s in steps])
    x, y = curve(pane.measured_curve)
    np.testing.assert_array_equal(x, tokens)
    np.testing.assert_array_equal(y, measured)
    np.testing.assert_array_equal(curve(pane.formula_curve)[1], measured)  # formula == measured
    np.testing.assert_array_equal(curve(pane.mha_curve)[1], [s.kv.mha_bytes for s in steps])
    assert tokens[0] == len(ran.prompt) and np.all(np.diff(tokens) == 1)

    for index in (1, 0):
        step = steps[index]
        pane.render(step)
        per_layer = np.asarray(step.kv.per_layer)
        np.testing.assert_array_equal(pane.key_bars.opts["height"], per_layer[:, 0])
        np.testing.assert_array_equal(pane.value_bars.opts["height"], per_layer[:, 1])
        np.testing.assert_array_equal(pane.value_bars.opts["y0"], per_layer[:, 0])
        text = pane.formula_label.text()
        assert (
            f"2 × layers(30) × kv_heads(3) × head_dim(64) × bytes(4) × tokens({step.kv.tokens})"
            f" = {step.kv.formula_bytes:,} bytes" in text
        )
        assert f"measured: {step.kv.bytes_total:,} bytes, equal" in text
        assert "with full MHA (9 KV heads)" in text and "GQA 9:3 saves ×3" in text
        assert f"added this step: {human_bytes(step.kv.bytes_added)}" in text
        assert "CPU: device memory n/a" in text
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(3 * 2**20) == "3 MiB"

    # keys and values hold equal bytes in this model: tell them apart with a doctored record
    from dataclasses import replace

    from llm_lens.core.records import frozen

    odd = np.asarray(steps[1].kv.per_layer) * np.array([1, 2]) + np.arange(30)[:, None]
    pane.render(replace(steps[1], kv=replace(steps[1].kv, per_layer=frozen(odd))))
    np.testing.assert_array_equal(pane.key_bars.opts["height"], odd[:, 0])
    np.testing.assert_array_equal(pane.value_bars.opts["height"], odd[:, 1])
    np.testing.assert_array_equal(pane.value_bars.opts["y0"], odd[:, 0])

    rows = check_exports(pane, tmp_path, len(steps))
    assert [int(r[2]) for r in rows] == list(measured)
    assert [int(r[4]) for r in rows] == list(measured)
    assert [int(r[3]) for r in rows] == [s.kv.bytes_added for s in steps]


@pytest.mark.slow
def test_byte_axis_ticks_in_binary_units(qtbot):
    import pyqtgraph as pg

    from llm_lens.desktop.panes.kvcache import ByteAxis, byte_axis

    widget = pg.PlotWidget(axisItems={"left": ByteAxis()})
    qtbot.addWidget(widget)
    plot = widget.getPlotItem()
    byte_axis(plot, 5.5 * 2**20)
    axis = plot.getAxis("left")
    levels = axis.tickValues(0, 6 * 2**20, 300)
    assert levels[0][1][:3] == [0.0, 2 * 2**20, 4 * 2**20]  # whole MiB, in bytes
    assert axis.tickStrings([2 * 2**20, 4 * 2**20], 1.0, 2 * 2**20) == ["2", "4"]
    assert axis.labelText == "MiB"


def _kv_records(family: str) -> tuple[Any, list[Any]]:
    """StepRecord-like records whose kv is measured from a real windowed cache."""
    from llm_lens.core.loading import describe

    model_type, overrides, _ = FAMILIES[family]
    model = _model(_config(model_type, **overrides))
    info = describe(model, "tiny", "test", "tiny")
    steps = [
        _Step(index=i, kv=kv, is_prefill=i == 0) for i, (_seen, kv) in enumerate(_steps(model))
    ]
    return info, steps


class _Step:
    def __init__(self, index: int, kv: Any, is_prefill: bool) -> None:
        self.index, self.kv, self.is_prefill = index, kv, is_prefill


@pytest.fixture
def kv_pane(qtbot, bare):
    from llm_lens.desktop.panes.kvcache import KVCachePane

    pane = KVCachePane(bare)
    qtbot.addWidget(pane)
    return pane


def test_kv_pane_mistral_window(kv_pane, bare) -> None:
    info, steps = _kv_records("mistral")
    bare.show_state(replace(bare.shown, info=info, steps=tuple(steps)))
    kv_pane.render(steps[0])
    text = kv_pane.formula_label.text()
    last = steps[0].kv
    assert f"= {last.formula_bytes:,} bytes" in text and "equal)" in text
    assert "tokens seen: 9; 0 full-attention layers hold all of them" in text
    assert "4 with a 5-token window hold 4" in text
    x, y = kv_pane.measured_curve.getData()
    np.testing.assert_array_equal(x, [9, 10, 11, 12, 13, 14])  # tokens seen, not held
    assert len(set(y.tolist())) == 1  # every layer windowed: the cache stops growing
    kv_pane.render(steps[2])
    text = kv_pane.formula_label.text()
    assert "added this step: 0 bytes (one token; every layer's window is full" in text


def test_kv_pane_gemma2_alternating(kv_pane, bare) -> None:
    info, steps = _kv_records("gemma2")
    bare.show_state(replace(bare.shown, info=info, steps=tuple(steps)))
    kv_pane.render(steps[-1])
    text = kv_pane.formula_label.text()
    assert "tokens seen: 14; 2 full-attention layers hold all of them, 2 with a 5-token" in text
    assert "in the full-attention layers only" in text and "DIFFERENT" not in text
    assert kv_pane.layer_plot.titleLabel.text.endswith("windowed: 0, 2")
    heights = kv_pane.key_bars.opts["height"]
    assert heights[1] > heights[0] and heights[3] > heights[2]  # full layers hold more


def test_kv_pane_says_when_the_tensors_hold_other_heads(kv_pane, bare) -> None:
    from llm_lens.core.loading import describe

    model = _model(_config("falcon", alibi=False, new_decoder_architecture=True, num_kv_heads=2))
    info = describe(model, "tiny", "test", "tiny")
    kv = _steps(model)[0][1]
    if kv.cached_kv_heads == 2:  # not order: transformers ≥ 5.2x stores Falcon's 2 KV heads
        pytest.skip("this transformers' Falcon caches its 2 KV heads: no mismatch to show")
    bare.show_state(
        replace(bare.shown, info=replace(info, num_kv_heads=2), steps=(_Step(0, kv, True),))
    )
    kv_pane.render(bare.steps[0])
    text = kv_pane.formula_label.text()
    assert "the cache holds K/V for 4 heads per layer, the config has 2 KV heads" in text
    assert "repeated to every query head" in text
    assert f"measured: {kv.bytes_total:,} bytes" in text


def test_kv_pane_draws_a_hybrids_growing_and_constant_parts_apart(kv_pane, bare, tokenizer):
    """Granite 4 (a Mamba2 layer and an attention layer): the K/V curve grows by one token a
    step, the state curve stays flat, each layer's state sits on its own bar, and the text
    names both parts; a plain model's record draws neither."""
    from llm_lens.core.loop.engine import Engine, RunConfig
    from llm_lens.core.sampling import GREEDY
    from tests.hybrid_families import hybrid_model

    engine = Engine(hybrid_model("granitemoehybrid", tokenizer))
    run = engine.start(engine.tokenize("one two three", chat=False), GREEDY, RunConfig(3))
    steps = run.run_all()
    bare.show_state(replace(bare.shown, info=engine.info, steps=tuple(steps)))
    kv_pane.render(steps[-1])
    state = [s.kv.state_bytes for s in steps]
    assert state[0] > 0 and len(set(state)) == 1
    np.testing.assert_array_equal(curve(kv_pane.state_curve)[1], state)
    grow = curve(kv_pane.growing_curve)[1]
    np.testing.assert_array_equal(grow, [s.kv.growing_bytes for s in steps])
    assert len(set(np.diff(grow).tolist())) == 1 and grow[1] > grow[0]
    per_layer = np.asarray(steps[-1].kv.per_layer).sum(axis=1)
    np.testing.assert_array_equal(kv_pane.state_bars.opts["height"], steps[-1].kv.state_per_layer)
    np.testing.assert_array_equal(kv_pane.state_bars.opts["y0"], per_layer)
    text = kv_pane.formula_label.text()
    assert "grows: K/V" in text and "in 1 layers; constant: conv/recurrent state" in text
    assert "with every layer attention like these" in text
    kv = steps[-1].kv
    assert (
        f"2 × layers(1) × kv_heads(2) × head_dim(8) × bytes(4) × tokens({kv.tokens}) + "
        f"state({kv.state_formula_bytes:,}) = {kv.formula_bytes:,} bytes" in text
    )
    assert kv.formula_bytes == 2 * 2 * 8 * 4 * kv.tokens + kv.state_formula_bytes
    names = [i[1].text for i in kv_pane.growth_plot.legend.items]
    assert "state (constant)" in names and "K/V (grow)" in names
    info, plain = _kv_records("mistral")
    bare.show_state(replace(bare.shown, info=info, steps=tuple(plain)))
    kv_pane.render(plain[0])
    assert not curve(kv_pane.state_curve)[0].size and "grows:" not in kv_pane.formula_label.text()
