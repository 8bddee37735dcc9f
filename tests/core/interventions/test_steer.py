"""Steering vectors: the vector is the difference of mean residuals a hand-written hook reads
(every position but the first and the special tokens), and a steered run equals transformers'
own greedy loop with a hand-written pre-hook adding the same vector times the strength (tokens,
and logits to 1e-4), on the bundled model and a tiny family model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core.interventions import InterventionError, parse_spec
from llm_lens.core.interventions.steer import SteeringVector, steering_vector
from llm_lens.core.loop.engine import Engine
from tests.core.interventions.reference import PROMPT, assert_same, engine_greedy, greedy_reference
from tests.families import family_model

FORMAL = ["Dear Sir, I would be grateful for your reply.", "Please find the report attached."]
CASUAL = ["hey can u send it lol", "yo thx for the stuff"]


@pytest.fixture(scope="module", params=["bundled", "gemma2"])
def eng(request: Any, tokenizer: Any) -> Engine:
    if request.param == "bundled":
        return request.getfixturevalue("engine")  # type: ignore[no-any-return]
    return Engine(family_model(request.param, tokenizer))


def _ids(engine: Engine, texts: list[str]) -> list[list[int]]:
    return [list(engine.tokenize(t, chat=False).ids) for t in texts]


def _hand_mean(engine: Engine, layer: int, prompts: list[list[int]], skip: set[int]) -> Any:
    """Each prompt's input to ``layer`` read by a plain pre-hook, averaged over its positions
    after the first that are not special, then over the prompts."""
    rows: list[Any] = []
    hook = engine.anatomy.layers[layer].register_forward_pre_hook(
        lambda _m, a, k: rows.append((a[0] if a else k["hidden_states"])[0].double()),
        with_kwargs=True,
    )
    means = []
    try:
        for ids in prompts:
            with torch.inference_mode():
                engine.model(input_ids=torch.tensor([ids]), use_cache=False)
            keep = [i for i, t in enumerate(ids) if i > 0 and t not in skip]
            means.append(rows.pop()[keep].mean(dim=0))
    finally:
        hook.remove()
    return torch.stack(means).mean(dim=0).numpy()


def test_the_vector_is_the_difference_of_mean_residuals(eng: Engine) -> None:
    skip = set(eng.tokenizer.all_special_ids)
    pos, neg = _ids(eng, FORMAL), _ids(eng, CASUAL)
    vec = steering_vector(eng.model, 1, pos, neg, eng.anatomy, skip)
    want = _hand_mean(eng, 1, pos, skip) - _hand_mean(eng, 1, neg, skip)
    np.testing.assert_allclose(vec.vector, want, atol=1e-5, rtol=1e-6)
    assert (vec.layer, vec.positives, vec.negatives) == (1, 2, 2)
    assert vec.norm == pytest.approx(float(np.linalg.norm(want)))


def test_a_steered_run_equals_a_hand_hook_adding_the_vector(eng: Engine) -> None:
    vec = steering_vector(eng.model, 1, _ids(eng, FORMAL), _ids(eng, CASUAL), eng.anatomy)
    strength = 0.5
    add = torch.tensor(vec.vector, dtype=torch.float32) * strength

    def hook(_m: Any, a: Any, k: Any) -> Any:
        h = (a[0] if a else k["hidden_states"]) + add
        return ((h, *a[1:]), k) if a else (a, k | {"hidden_states": h})

    handle = eng.anatomy.layers[1].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        ref = greedy_reference(eng.model, list(eng.tokenize(PROMPT, chat=False).ids))
    finally:
        handle.remove()
    steered = engine_greedy(eng, [vec.to_intervention(strength)])
    assert_same(steered, ref)
    plain = engine_greedy(eng, [])
    assert not np.allclose(plain[1], steered[1], atol=1e-3)  # it steers


def test_the_vector_round_trips_and_reads_as_a_spec(tmp_path: Any, tiny_engine: Engine) -> None:
    e = tiny_engine
    vec = steering_vector(e.model, 1, _ids(e, FORMAL), _ids(e, CASUAL), e.anatomy)
    assert SteeringVector.from_dict(vec.to_dict()) == vec
    path = tmp_path / "formal.npy"
    vec.save(path)
    assert not list(tmp_path.glob("*.part*"))
    assert parse_spec(f"resid:1+={path}*2.5") == vec.to_intervention(2.5)
    assert vec.to_intervention(1.0, (3, 4)).positions == (3, 4)


def test_what_cannot_make_a_vector_is_one_error(tmp_path: Any, tiny_engine: Engine) -> None:
    e, pos = tiny_engine, _ids(tiny_engine, FORMAL)
    cases = [
        (lambda: steering_vector(e.model, 1, pos, [], e.anatomy), "no negative prompts"),
        (lambda: steering_vector(e.model, 99, pos, pos, e.anatomy), "no layer 99"),
        (lambda: steering_vector(e.model, 1, pos, [pos[0][:1]], e.anatomy), "too short"),
        (lambda: SteeringVector(1, (1.0, float("nan")), 1, 1), "NaN"),
        (lambda: SteeringVector(1, (1.0,), 1, 1).to_intervention(float("inf")), "finite"),
        (lambda: SteeringVector(1, (1.0,), 1, 1).save(tmp_path / "v.txt"), ".npy"),
        (lambda: SteeringVector.from_dict({"layer": 1}), "not a steering vector"),
    ]
    for make, words in cases:
        with pytest.raises(InterventionError, match=words):
            make()
    assert not list(tmp_path.iterdir())


def test_patch_from_another_prompt_holds_its_hidden_states(tiny_engine: Engine) -> None:
    """The patch's rows are transformers' own hidden_states[layer] of the other prompt at those
    positions (the stream entering that layer); a position past its end is one error."""
    from llm_lens.core.interventions.steer import patch_from

    eng = tiny_engine
    ids = eng.tokenize("the cat sat on the mat", chat=False).ids
    patch = patch_from(eng.model, eng.anatomy, 1, ids, [3, 1])
    assert patch.layer == 1 and patch.positions == (1, 3)
    with torch.inference_mode():
        out = eng.model(input_ids=torch.tensor([list(ids)]), output_hidden_states=True)
    ref = out.hidden_states[1][0].double().numpy()  # (T, hidden)
    np.testing.assert_allclose(np.array(patch.values), ref[[1, 3]], rtol=1e-5, atol=1e-6)
    with pytest.raises(InterventionError, match=f"has {len(ids)} tokens: it has no position 99"):
        patch_from(eng.model, eng.anatomy, 1, ids, [99])
    with pytest.raises(InterventionError, match="no layer 9"):
        patch_from(eng.model, eng.anatomy, 9, ids, [0])
