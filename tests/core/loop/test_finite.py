"""A model that computes NaN or Inf is stopped at that step, with the layer and sublayer named
(core/loop/finite.py), in the loop, the CLI and the line the window's worker relays."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from llm_lens.core.cli import main
from llm_lens.core.errors import LensError, NonFiniteError
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY, SamplingParams
from tests.conftest import make_tiny

SAMPLED = SamplingParams(temperature=0.7, top_p=0.95, seed=0)
SETTINGS_BLAME = "these settings make the distribution NaN"


def _broken(tokenizer, layers: int = 3, **overrides):
    """A fresh tiny Llama (its weights are changed, so never the shared one)."""
    return make_tiny(tokenizer, num_hidden_layers=layers, **overrides)


def _error(loaded, params=GREEDY, prompt: str = "hi there", tokens: int = 4) -> NonFiniteError:
    engine = Engine(loaded)
    run = engine.start(engine.tokenize(prompt), params, RunConfig(max_new_tokens=tokens))
    with pytest.raises(NonFiniteError) as caught:
        run.run_all()
    return caught.value


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_nan_in_one_mlp_is_named_and_stops_the_run(tokenizer, params):
    loaded = _broken(tokenizer)
    with torch.no_grad():
        loaded.model.model.layers[1].mlp.down_proj.weight[3, 5] = float("nan")
    engine = Engine(loaded)
    prompt = engine.tokenize("hi there")
    run = engine.start(prompt, params, RunConfig(max_new_tokens=4))
    with pytest.raises(NonFiniteError) as caught:
        run.run_all()
    err = caught.value
    assert (err.value, err.step, err.where) == ("NaN", 0, "layer 1's MLP output")
    assert err.positions == tuple(range(len(prompt)))  # the MLP works on every position
    assert run.steps == []  # no token was chosen from NaN
    text = str(err)
    assert text.startswith("the model computed NaN at step 0: first in layer 1's MLP output")
    assert f"(positions 0-{len(prompt) - 1})" in text and "not the sampler settings" in text
    assert SETTINGS_BLAME not in text


def test_float16_overflow_is_named_as_inf(tokenizer):
    loaded = _broken(tokenizer)
    model = loaded.model.half()
    with torch.no_grad():  # activations past float16's 65,504: Inf, then NaN after the norm
        model.model.layers[2].mlp.up_proj.weight.mul_(3000)
        model.model.layers[2].mlp.down_proj.weight.mul_(3000)
    err = _error(loaded)
    assert (err.value, err.step, err.where) == ("Inf", 0, "layer 2's MLP output")
    assert err.positions and "computed Inf at step 0" in str(err)


def test_a_broken_norm_is_named(tokenizer):
    loaded = _broken(tokenizer)
    with torch.no_grad():
        loaded.model.model.layers[0].post_attention_layernorm.weight[7] = float("nan")
    err = _error(loaded)
    assert err.where == "layer 0's norm (post_attention_layernorm) output"


def test_attention_is_named(tokenizer):
    loaded = _broken(tokenizer)
    with torch.no_grad():
        loaded.model.model.layers[2].self_attn.o_proj.weight[0, 0] = float("inf")
    err = _error(loaded)
    assert err.where == "layer 2's attention output"


def _first_token(loaded, prompt: str) -> int:
    engine = Engine(loaded)
    run = engine.start(engine.tokenize(prompt), GREEDY, RunConfig(max_new_tokens=1))
    return run.run_all()[0].token.id


def test_nan_at_a_later_step_is_placed_at_its_position(tokenizer):
    """The token chosen at step 0 has a NaN embedding: step 1 (a decode step, probed again over
    the cropped cache) finds it in the embeddings, at the response's first position."""
    loaded = _broken(tokenizer, tie_word_embeddings=False)  # the head keeps its own row
    token = _first_token(loaded, "hi there")
    assert token not in Engine(loaded).tokenize("hi there").ids
    with torch.no_grad():
        loaded.model.model.embed_tokens.weight[token, 2] = float("nan")
    engine = Engine(loaded)
    prompt = engine.tokenize("hi there")
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=4))
    with pytest.raises(NonFiniteError) as caught:
        run.run_all()
    err = caught.value
    assert (err.step, err.positions) == (1, (len(prompt),))
    assert err.where == "the embeddings (the first layer's input)"
    assert len(run.steps) == 1 and np.isfinite(run.steps[0].logits).all()


def test_a_cache_that_cannot_be_cropped_still_names_the_layer(tokenizer, monkeypatch):
    """Without the probed second pass the step's own capture still places it: layer 1, after
    its attention (whose output is finite), i.e. its MLP or the sum."""
    from transformers import DynamicCache

    def refuse(*_args):
        raise NotImplementedError("no crop")

    monkeypatch.setattr(DynamicCache, "crop", refuse)
    loaded = _broken(tokenizer)
    with torch.no_grad():
        loaded.model.model.layers[1].mlp.down_proj.weight[3, 5] = float("nan")
    err = _error(loaded)
    assert err.where == "layer 1's output (its residual sum)" and err.step == 0


def test_the_error_is_the_one_line_the_worker_relays(tokenizer):
    """The window's worker shows a run's LensError as one line in the status bar
    (``except LensError as exc: fail(str(exc))``); this is that error."""
    loaded = _broken(tokenizer)
    with torch.no_grad():
        loaded.model.model.layers[0].mlp.up_proj.weight.fill_(float("nan"))
    engine = Engine(loaded)
    run = engine.start(engine.tokenize("hi"), SAMPLED, RunConfig(max_new_tokens=2))
    relayed = []
    try:
        for _record in run:  # how the worker's live job iterates a run
            pass
    except LensError as exc:
        relayed.append(str(exc))
    assert len(relayed) == 1 and "\n" not in relayed[0]
    assert "layer 0's MLP output" in relayed[0] and SETTINGS_BLAME not in relayed[0]


def test_the_cli_says_where_in_one_line_and_exits_1(tokenizer, tmp_path, capsys):
    loaded = _broken(tokenizer)
    with torch.no_grad():
        loaded.model.model.layers[1].mlp.down_proj.weight[0, 0] = float("nan")
    folder = tmp_path / "nan-model"
    loaded.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    capsys.readouterr()  # the save's own progress bars
    out = tmp_path / "trace.json"
    for extra in (["--greedy"], ["--temperature", "0.7"]):
        code = main(["trace", "hi", "--model", str(folder), "--quiet", "--out", str(out), *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1 and len(err) == 1, err
        assert "computed NaN at step 0: first in layer 1's MLP output" in err[0]
        assert SETTINGS_BLAME not in err[0]
        data = json.loads(out.read_text(), parse_constant=_refuse)  # strict JSON
        assert data["steps"] == [] and data["finish_reason"] == "non_finite"
        record = data["non_finite"]
        assert (record["step"], record["layer"], record["sublayer"]) == (0, 1, "MLP")
        out.unlink()


def _refuse(name):
    raise ValueError(f"not JSON: {name}")


def test_positions_are_told_in_ranges():
    err = NonFiniteError("NaN", 3, "the head's logits", (0, 1, 2, 5, 7, 8, 10, 12, 13))
    assert "(positions 0-2, 5, 7-8, 10 and 2 more)" in str(err)
    assert "(position 4)" in str(NonFiniteError("Inf", 0, "x", (4,)))


@pytest.mark.slow
def test_the_bundled_model_runs_clean(greedy20):
    """The check never fires on a real model's numbers."""
    assert all(np.isfinite(s.logits).all() and np.isfinite(s.hidden).all() for s in greedy20.steps)
