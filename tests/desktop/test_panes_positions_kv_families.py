"""Positions and KV panes on other families: each draws what the model itself uses and holds.

The views come from tiny random models of each family (their own rotary module, table, slopes,
and a ``DynamicCache`` their forward filled); no model is loaded into the controller.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from llm_lens.core.positions import position_view
from tests.core.kvcache.test_windows import FAMILIES, _config, _model, _steps
from tests.core.test_positions import _model as _pos_model


@pytest.fixture
def bare(qtbot):
    """A controller with no model loaded (its worker thread stopped afterwards)."""
    from llm_lens.desktop.state.controller import Controller

    ctl = Controller()
    yield ctl
    ctl.shutdown()


@pytest.fixture
def positions_pane(qtbot, bare):
    from llm_lens.desktop.panes.positions import PositionsPane

    pane = PositionsPane(bare)
    qtbot.addWidget(pane)
    pane.resize(700, 400)
    return pane


def test_gemma3_local_and_global_sets(positions_pane) -> None:
    model = _pos_model(
        "gemma3_text", num_hidden_layers=4, head_dim=8, num_key_value_heads=2,
        sliding_window=8, sliding_window_pattern=2,
    )  # fmt: skip
    view = position_view(model, 20)
    pane = positions_pane
    pane.show_view(view)
    assert not pane.rope_choice.isHidden() and pane.rope_choice.count() == 2
    texts = [pane.rope_choice.itemText(i) for i in range(2)]
    assert texts == ["full_attention (layers 1, 3)", "sliding_attention (layers 0, 2)"]
    np.testing.assert_array_equal(pane.angles.image, view.rope[0].angles)
    assert (
        "θ = 1e+06" in pane.summary.text() and "full_attention layers (1, 3)" in pane.summary.text()
    )
    pane.rope_choice.setCurrentIndex(1)
    np.testing.assert_array_equal(pane.angles.image, view.rope[1].angles)
    _x, y = pane.freq_curve.getOriginalDataset()
    np.testing.assert_array_equal(y, view.rope[1].inv_freq)
    assert "θ = 10000" in pane.summary.text()


def test_partial_rotary_says_how_many_dims(positions_pane) -> None:
    view = position_view(_pos_model("stablelm", partial_rotary_factor=0.25), 20)
    positions_pane.show_view(view)
    assert positions_pane.angles.image.shape == (20, 1)  # one rotated pair drawn, not four
    assert "only 2 of head_dim 8 rotated (1 pairs; the other 6 carry no position)" in (
        positions_pane.summary.text()
    )


def test_llama3_summary_shows_the_real_slowest_wavelength(positions_pane) -> None:
    params = dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
        high_freq_factor=4.0, original_max_position_embeddings=32,
    )  # fmt: skip
    model = _pos_model("llama", hidden_size=64, rope_parameters=params)
    positions_pane.show_view(position_view(model, 20))
    text = positions_pane.summary.text()
    assert "llama3 scaling" in text and "slowest pair 4.87e+06 tokens" in text


def test_learned_table_and_similarity(positions_pane, tmp_path) -> None:
    model = _pos_model("gpt2", n_embd=32, n_layer=2, n_head=4, n_positions=64)
    view = position_view(model, 24)
    pane = positions_pane
    pane.show_view(view)
    assert pane.stack.currentWidget() is pane.learned_view and not pane.stack.isHidden()
    np.testing.assert_array_equal(
        pane.table_image.image, model.transformer.wpe.weight[:24].detach()
    )
    np.testing.assert_array_equal(pane.similarity.image, view.learned.similarity)
    assert "transformer.wpe holds one vector per position (64 positions)" in pane.summary.text()
    header, rows = pane.csv_table()
    assert header == ("position", "norm", "similarity_to_previous") and len(rows) == 24
    assert rows[3][2] == pytest.approx(float(view.learned.similarity[3, 2]))
    opt = position_view(_pos_model("opt", ffn_dim=64, word_embed_proj_dim=32), 24)
    pane.show_view(opt)
    assert "OPT offsets positions by 2" in pane.summary.text()


def test_alibi_slopes_per_head(positions_pane) -> None:
    view = position_view(_pos_model("falcon", alibi=True), 20)
    pane = positions_pane
    pane.show_view(view)
    assert pane.stack.currentWidget() is pane.alibi_view
    np.testing.assert_array_equal(pane.slope_bars.opts["height"], [2**-2, 2**-4, 2**-6, 2**-8])
    assert len(pane.bias_curves) == 4
    _x, bias = pane.bias_curves[0].getData()
    assert bias[10] == pytest.approx(-0.25 * 10 / np.sqrt(8))
    assert "ALiBi" in pane.summary.text() and "√head_dim" in pane.summary.text()
    assert pane.csv_table()[1][1] == (1, 2**-4)


def test_no_model_asks_nothing(positions_pane, bare) -> None:
    positions_pane.render(None)  # no model: nothing asked, nothing drawn
    assert positions_pane.view is None


# ----------------------------------------------------------------------- KV pane
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
