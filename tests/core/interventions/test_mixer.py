"""A hybrid layer's token mixer that is not attention (Mamba, gated DeltaNet, a short
convolution): ``mixer:L=0|*F`` scales its output, equal to a forward hook written by hand on that
module in transformers' own forward; a part the layer lacks (attention on a Mamba layer, a mixer
on an attention layer, an MLP on a pure Mamba layer) is one clear error before the run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core.interventions import BlockEdit, InterventionError, parse_spec, to_spec
from llm_lens.core.loop.engine import Engine
from tests.core.interventions.reference import PROMPT, engine_greedy
from tests.hybrid_families import hybrid_model

# family -> the attribute of layer 0 (not attention) that holds its mixer, as its modeling file
MIXERS = {"jamba": "mamba", "lfm2": "conv", "qwen3_next": "linear_attn"}


@pytest.fixture(scope="module", params=list(MIXERS))
def hybrid(request: Any, tokenizer: Any) -> tuple[str, Engine]:
    return request.param, Engine(hybrid_model(request.param, tokenizer))


def _uncached_greedy(model: Any, ids: list[int], steps: int = 4) -> tuple[list[int], np.ndarray]:
    """(tokens, first logits) of a greedy loop that runs the whole context each step."""
    context, tokens, first = list(ids), [], None
    with torch.inference_mode():
        for _ in range(steps):
            logits = model(torch.tensor([context]), use_cache=False).logits[0, -1].float()
            first = logits.numpy().copy() if first is None else first
            tokens.append(int(logits.argmax()))
            context.append(tokens[-1])
    assert first is not None
    return tokens, first


@pytest.mark.parametrize("factor", [0.0, 0.5])
def test_a_scaled_mixer_equals_a_hand_hook_on_it(hybrid: Any, factor: float) -> None:
    name, engine = hybrid
    module = getattr(engine.model.base_model.layers[0], MIXERS[name])

    def scale(_m: Any, _i: Any, out: Any) -> Any:
        return (out[0] * factor, *out[1:]) if isinstance(out, tuple) else out * factor

    handle = module.register_forward_hook(scale)
    try:
        ids = list(engine.tokenize(PROMPT, chat=False).ids)
        reference = _uncached_greedy(engine.model, ids)
    finally:
        handle.remove()
    tokens, logits, _run = engine_greedy(engine, [BlockEdit(0, "mixer", factor)])
    assert tokens == reference[0]
    np.testing.assert_allclose(logits, reference[1], atol=1e-4, rtol=0)
    clean = engine_greedy(engine, [])
    assert np.abs(clean[1] - logits).max() > 1e-5  # the mixer mattered (a tiny random model)


def test_falcon_h1s_parallel_layer_scales_its_mamba_and_its_attention_apart(
    tokenizer: Any,
) -> None:
    engine = Engine(hybrid_model("falcon_h1", tokenizer))
    layer = engine.model.base_model.layers[0]
    ids = list(engine.tokenize(PROMPT, chat=False).ids)
    clean = engine_greedy(engine, [])[1]
    for part, module in (("mixer", layer.mamba), ("attn", layer.self_attn)):
        handle = module.register_forward_hook(
            lambda _m, _i, out: (out[0] * 0.0, *out[1:]) if isinstance(out, tuple) else out * 0.0
        )
        try:
            reference = _uncached_greedy(engine.model, ids)
        finally:
            handle.remove()
        tokens, logits, _run = engine_greedy(engine, [BlockEdit(0, part, 0.0)])
        assert tokens == reference[0]
        np.testing.assert_allclose(logits, reference[1], atol=1e-4, rtol=0)
        assert np.abs(clean - logits).max() > 1e-5  # each part mattered


def test_a_part_the_layer_lacks_is_one_error(hybrid: Any) -> None:
    _name, engine = hybrid
    with pytest.raises(InterventionError, match="layer 0 has no attention"):
        engine_greedy(engine, [BlockEdit(0, "attn", 0.0)], steps=1)
    with pytest.raises(InterventionError, match="layer 1 has no mixer besides attention"):
        engine_greedy(engine, [BlockEdit(1, "mixer", 0.0)], steps=1)


def test_a_pure_mamba_layer_has_no_mlp_and_no_heads(tokenizer: Any) -> None:
    engine = Engine(hybrid_model("mamba", tokenizer))
    with pytest.raises(InterventionError, match="layer 0 has no MLP"):
        engine_greedy(engine, [BlockEdit(0, "mlp", 0.0)], steps=1)
    with pytest.raises(InterventionError, match="layer 1 has no attention"):
        engine_greedy(engine, [parse_spec("head:1.0=0")], steps=1)


def test_a_pure_mamba_model_runs_its_mixer_and_forget(tokenizer: Any) -> None:
    """Its config has no head count: the interventions it takes still run; forgetting a token
    changes nothing there (no attention to hide it from: the state carries it)."""
    from llm_lens.core.interventions import Forget

    engine = Engine(hybrid_model("mamba", tokenizer))
    clean = engine_greedy(engine, [], steps=1)
    np.testing.assert_array_equal(engine_greedy(engine, [Forget(2)], steps=1)[1], clean[1])
    mixed = engine_greedy(engine, [BlockEdit(0, "mixer", 0.5)], steps=1)
    assert np.abs(mixed[1] - clean[1]).max() > 1e-5


def test_the_mixer_spec_reads_and_writes() -> None:
    item = parse_spec("mixer:3*0.25")
    assert item == BlockEdit(3, "mixer", 0.25) and to_spec(item) == "mixer:3*0.25"
    assert to_spec(parse_spec("mixer:0=0")) == "mixer:0=0"
    with pytest.raises(InterventionError, match="attn, mlp or mixer"):
        BlockEdit(0, "conv", 0.0)


def test_forgetting_a_token_on_a_hybrid_hides_it_from_its_attention_layers(hybrid: Any) -> None:
    from llm_lens.core.interventions import Forget

    _name, engine = hybrid
    clean = engine_greedy(engine, [], steps=1)
    forgot = engine_greedy(engine, [Forget(2)], steps=1)
    assert np.abs(clean[1] - forgot[1]).max() > 1e-5


def test_the_model_info_says_which_layers_have_an_mlp(hybrid: Any, tokenizer: Any) -> None:
    assert Engine(hybrid_model("mamba", tokenizer)).info.layer_mlps == (False, False)
    assert hybrid[1].info.layer_mlps == (True, True)
