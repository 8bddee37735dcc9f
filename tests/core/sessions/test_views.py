"""Views recorded into a session: the prompt's attention maps, and the analysis a reopened
file answers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from llm_lens.core.sessions.compact import weight_error_bound
from llm_lens.core.sessions.format import Session, session_from_run
from llm_lens.core.sessions.read import load_session
from llm_lens.core.sessions.views import prompt_attention_maps
from llm_lens.core.sessions.write import save_session

ROOT = Path(__file__).resolve().parents[3]


def test_prompt_attention_maps_match_the_prefill(greedy_run, engine):
    maps = prompt_attention_maps(greedy_run)
    t = len(greedy_run.prompt)
    assert maps.shape == (30, 9, t, t)
    np.testing.assert_allclose(maps[:, :, -1, :], greedy_run.steps[0].attention, atol=1e-5)
    np.testing.assert_allclose(maps.sum(axis=-1), 1.0, atol=1e-5)
    assert not np.triu(maps, k=1).any()  # causal: no query attends to a later key
    with pytest.raises(ValueError, match="prompt attention"):
        session_from_run(greedy_run, engine.info, prompt_attention=maps[:, :, :5, :5])
    too_long = SimpleNamespace(prompt=[0] * 257)
    one_layer = SimpleNamespace(num_layers=1, num_heads=1)
    with pytest.raises(ValueError, match="T ≤ 256"):
        session_from_run(too_long, one_layer, prompt_attention=np.zeros((1, 1, 257, 257)))


def test_recorded_analysis_answers_like_the_model(greedy_run, engine, tmp_path):
    """A reopened session answers the panes' requests with what the model computed."""
    from llm_lens.core import attention, layers
    from llm_lens.core.positions import position_view
    from llm_lens.core.sessions.views import RecordedAnalysis, recorded_run

    path = tmp_path / "rec.llmlens"
    save_session(path, Session(model=engine.info.as_dict(), runs=(recorded_run(greedy_run),)))
    recorded = RecordedAnalysis(load_session(path).runs[0])
    for step in (0, 3):
        live = layers.logit_lens(engine, greedy_run.steps[step], 5)
        got = recorded.get("lens", {"step": step, "k": 5})
        assert np.array_equal(got.top_ids, live.top_ids) and got.top_texts == live.top_texts
        # the file keeps the residual stream as float16: the lens agrees to that rounding
        np.testing.assert_allclose(got.top_probs, live.top_probs, rtol=2e-3, atol=1e-3)
    live_map = attention.attention_map(
        engine, greedy_run.cache, greedy_run.prefill.hidden, 4, 2, max_size=256
    )
    got_map = recorded.get("attention_map", {"layer": 4, "head": 2, "max_size": 256})
    bound = weight_error_bound(live_map.weights) + 1e-5  # uint8 codes of √w on disk
    assert np.all(np.abs(got_map.weights - live_map.weights) <= bound)
    live_pl = layers.prompt_lens(engine, greedy_run.prefill.hidden)
    assert np.array_equal(recorded.get("prompt_lens", {}).top1_ids, live_pl.top1_ids)
    proj = recorded.get("embedding_projection", {})
    assert proj.coords.shape == (engine.info.vocab_size, 2)
    assert recorded.get("neighbours", {"token_id": 5}) is None  # needs the model
    assert recorded.get("attention_overview", {}).shape == (30, 9, 32, 32)
    t = len(greedy_run.prompt)
    live_pos = position_view(engine.model, t).rope[0]
    got_pos = recorded.get("positions", {"positions": t}).rope[0]
    assert got_pos.layers == tuple(range(30)) and got_pos.theta == live_pos.theta
    # float16 on disk (format 2)
    np.testing.assert_allclose(got_pos.angles, live_pos.angles, rtol=2e-3, atol=5e-3)
    np.testing.assert_allclose(got_pos.inv_freq, live_pos.inv_freq, rtol=2e-3)
    assert recorded.get("positions", {"positions": t + 1}) is None  # another prompt length
