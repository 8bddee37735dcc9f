"""The words beside the numbers: "Why this token?" names only the terms the model has (SmolLM2
has neither biases nor a soft-cap), counts agree with their nouns, a probability never reads
0.000, and a draw from beyond the recorded top tokens is not named '#21661'."""

from __future__ import annotations

import numpy as np
import pytest

from llm_lens.core import cards as ex
from llm_lens.core.arithmetic import draw_at
from llm_lens.core.sampling import SamplingParams

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def explained(engine, greedy_run):
    from llm_lens.core.explain.attribution import explain

    return explain(engine, greedy_run.steps[3])


def test_a_bias_free_uncapped_model_shows_no_bias_nor_soft_cap(qapp, explained):
    from llm_lens.desktop.panes.attribution import split_text

    lg = explained.logits
    assert not lg.has_biases and not lg.has_softcap
    assert abs(lg.residual) < 1e-3  # what is left is rounding, not a term of the model
    text = split_text(lg)
    assert "soft-cap" not in text and "biases" not in text
    assert "float32 rounding" in text
    headline = ex.attribution_card(explained).headline
    assert "bias" not in headline and "soft-cap" not in headline
    assert headline.startswith(ex.q(explained.token_text) + ": logit")


def test_counts_agree_with_their_nouns_and_small_probabilities_are_not_zero():
    assert ex.count(1, "token") == "1 token"
    assert ex.count(3434, "token") == "3,434 tokens"
    assert ex.count(0, "row") == "0 rows"
    assert ex.p3(0.0002) == "< 0.001"
    assert ex.p3(0.0) == "0.000" and ex.p3(0.4567) == "0.457"


def test_the_tokens_card_says_1_token():
    card = ex.tokens_card(["Hi", "!"], [0, 1], 1, -1, "M")
    assert card.headline == "M read the prompt as 1 token and wrote 1."
    card = ex.tokens_card(["Hi", "!"], [0, 1], 1, 0, "M")
    assert "the prompt is 1 token." in card.headline
    assert card.numbers == ("2 tokens in all, so the KV cache holds 2 rows.",)


def test_a_draw_beyond_the_top_tokens_is_said_to_be_one(greedy_run):
    step = greedy_run.steps[2]
    top = {int(i) for i in step.top_ids}
    for seed in range(200):
        params = SamplingParams(temperature=2.0, seed=seed)
        if draw_at(step, params).token_id not in top:
            break
    else:
        pytest.skip("no draw beyond the recorded top tokens in 200 seeds")
    card, draw = ex.sampling_card(step, params)
    assert f"a token beyond the top {len(step.top_ids)} (id {draw.token_id}," in card.headline
    assert f"#{draw.token_id}" not in card.headline
    kept = [line for line in card.numbers if line.startswith("after ")]
    assert kept and all(("1 token keeps" in s) or ("tokens keep" in s) for s in kept)
    assert np.isfinite(draw.stages[-1].prob)
