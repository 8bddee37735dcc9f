"""desktop.panes.positions: the Positions pane draws what the model itself uses, on the real
model and on tiny random models of other families (their own rotary module, table, slopes)."""

from __future__ import annotations

import numpy as np
import pytest

from llm_lens.core.positions import position_view
from tests.core.test_positions import _model as _pos_model
from tests.desktop.conftest import wait_result
from tests.desktop.panes.helpers import check_exports


@pytest.mark.slow
def test_positions_pane_is_the_models_rope(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.positions import PositionsPane

    pane = PositionsPane(ran)
    qtbot.addWidget(pane)
    n = len(ran.prompt)
    view = wait_result(qtbot, ran, "positions", positions=n)
    pane.render(ran.current_step())
    info = ran.info
    rope = view.rope[0]
    # the model's own rotary module, not a recomputation from θ
    np.testing.assert_array_equal(
        rope.inv_freq, ran.worker.workbench.engine.model.model.rotary_emb.inv_freq
    )
    _x, y = pane.freq_curve.getOriginalDataset()
    np.testing.assert_array_equal(y, rope.inv_freq)
    np.testing.assert_array_equal(pane.angles.image, rope.angles)
    assert pane.angles.image.shape == (n, info.head_dim // 2)
    _x, score = pane.score_curve.getData()
    np.testing.assert_array_equal(score, rope.score_vs_distance)
    text = pane.summary.text()
    assert f"θ = {info.rope_theta:g}" in text and "RoPE from the model's rotary module" in text
    assert (
        f"all {info.head_dim} dimensions of each head rotated in {info.head_dim // 2} pairs" in text
    )
    assert pane.rope_choice.isHidden()  # one rotary set
    rows = check_exports(
        pane, tmp_path, info.head_dim // 2, header=("pair", "inv_freq", "wavelength")
    )
    assert float(rows[0][2]) == pytest.approx(2 * np.pi)  # pair 0 turns once per 2π tokens
    assert float(rows[-1][1]) == pytest.approx(float(rope.inv_freq[-1]), rel=1e-6)


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
