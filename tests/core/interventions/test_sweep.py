"""A patching sweep's every cell equals one full forward of the corrupted prompt with that one
place replaced by the clean run's value, written by hand here (a pre-hook on the block, or on
the attention output projection); the clean and corrupted metrics are the plain runs'. Checked
cell by cell on tiny models of several families (GQA, sliding windows, other norms, learned
positions, MoE, hybrids whose layers are not all attention) and on a few random cells of the
bundled model."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.errors import Cancelled, PromptError
from llm_lens.core.interventions.places import out_projection
from llm_lens.core.interventions.sweep import Metric, patching_sweep
from tests.families import family_model
from tests.hybrid_families import hybrid_model

CLEAN = "The Eiffel Tower is in the city of"
CORRUPT = "The Colosseum Tower is in the city of"
FAMILIES = ["llama3", "gpt2", "qwen2", "gemma2", "opt", "gpt_neox", "mixtral", "olmo2"]
HYBRIDS = ["lfm2", "cohere2", "mamba"]  # mamba: a config with no attention heads at all


def _pair(tokenizer: Any, clean: str = CLEAN, corrupt: str = CORRUPT) -> tuple[list[int], ...]:
    a = tokenizer.encode(clean, add_special_tokens=False)
    b = tokenizer.encode(corrupt, add_special_tokens=False)
    n = min(len(a), len(b))
    return a[:n], b[:n]


@pytest.fixture(scope="module", params=FAMILIES + HYBRIDS)
def setup(request: Any, tokenizer: Any) -> tuple[Any, list[int], list[int]]:
    build = hybrid_model if request.param in HYBRIDS else family_model
    return build(request.param, tokenizer).model, *_pair(tokenizer)


def _metric_of(model: Any, ids: list[int], metric: Metric) -> float:
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[:, -1]
    return float(metric.of(logits)[0])


def _clean_inputs(model: Any, anatomy: Anatomy, ids: list[int]) -> tuple[list[Any], dict]:
    """The clean run's input to each block and to each attention output projection (T, …)."""
    blocks: list[Any] = []
    projs: dict[int, Any] = {}
    handles = [
        layer.register_forward_pre_hook(
            lambda _m, a, k: blocks.append((a[0] if a else k["hidden_states"])[0].clone()),
            with_kwargs=True,
        )
        for layer in anatomy.layers
    ] + [
        out_projection(anatomy, i).register_forward_pre_hook(
            lambda _m, a, i=i: projs.__setitem__(i, a[0][0].clone())
        )
        for i in range(len(anatomy.layers))
        if anatomy.has_attention(i)
    ]
    _metric_of(model, ids, Metric(0))
    for h in handles:
        h.remove()
    return blocks, projs


def _hand_residual(model: Any, anatomy: Anatomy, corrupt: list[int], value: Any,
                   layer: int, p: int, metric: Metric) -> float:  # fmt: skip
    """The corrupted run with the residual entering ``layer`` at ``p`` set to ``value``."""

    def resid(_m: Any, a: Any, k: Any) -> Any:
        h = (a[0] if a else k["hidden_states"]).clone()
        h[0, p] = value
        return ((h, *a[1:]), k) if a else (a, k | {"hidden_states": h})

    handle = anatomy.layers[layer].register_forward_pre_hook(resid, with_kwargs=True)
    try:
        return _metric_of(model, corrupt, metric)
    finally:
        handle.remove()


def _hand_head(model: Any, anatomy: Anatomy, corrupt: list[int], clean_in: Any,
               layer: int, head: int, metric: Metric) -> float:  # fmt: skip
    """The corrupted run with ``head``'s slice of the output projection's input at ``layer``
    replaced by the clean run's, at every position."""
    heads = model.config.num_attention_heads

    def one_head(_m: Any, a: Any) -> Any:
        x = a[0].clone()
        width = x.shape[-1] // heads
        part = slice(head * width, (head + 1) * width)
        x[0, :, part] = clean_in[:, part]
        return (x, *a[1:])

    handle = out_projection(anatomy, layer).register_forward_pre_hook(one_head)
    try:
        return _metric_of(model, corrupt, metric)
    finally:
        handle.remove()


def test_every_cell_equals_one_hand_hooked_forward(setup: Any) -> None:
    model, clean, corrupt = setup
    anatomy, metric = Anatomy.of(model), Metric(11, 22)
    result = patching_sweep(model, clean, corrupt, metric)
    blocks, projs = _clean_inputs(model, anatomy, clean)
    heads = getattr(model.config, "num_attention_heads", None) or 1  # Mamba's: none
    assert result.residual.shape == (len(anatomy.layers), len(clean))
    assert result.heads.shape == (len(anatomy.layers), heads)
    assert result.clean == pytest.approx(_metric_of(model, clean, metric), abs=1e-4)
    assert result.corrupt == pytest.approx(_metric_of(model, corrupt, metric), abs=1e-4)
    for layer in range(len(anatomy.layers)):
        for p in range(len(clean)):
            want = _hand_residual(model, anatomy, corrupt, blocks[layer][p], layer, p, metric)
            assert result.residual[layer, p] == pytest.approx(want, abs=1e-4), (layer, p)
        for head in range(heads):
            if layer not in projs:  # no attention here: no head to patch
                assert np.isnan(result.heads[layer, head])
                continue
            want = _hand_head(model, anatomy, corrupt, projs[layer], layer, head, metric)
            assert result.heads[layer, head] == pytest.approx(want, abs=1e-4), (layer, head)
    # where the prompts differ, patching the first layer's input restores something
    differ = [p for p in range(len(clean)) if clean[p] != corrupt[p]]
    assert not np.allclose(result.residual[0, differ], result.corrupt, atol=1e-6)


def test_random_cells_on_the_bundled_model(loaded: Any) -> None:
    """SmolLM2: a few random cells of each map, each against its own hand-hooked forward."""
    model, tokenizer = loaded.model, loaded.tokenizer
    clean, corrupt = _pair(tokenizer, "My friend lives in Paris, so", "My friend lives in Rome, so")
    anatomy = Anatomy.of(model)
    paris, rome = (tokenizer.encode(t, add_special_tokens=False)[0] for t in (" Paris", " Rome"))
    metric = Metric(paris, rome)
    result = patching_sweep(model, clean, corrupt, metric, anatomy)
    blocks, projs = _clean_inputs(model, anatomy, clean)
    rng = np.random.default_rng(7)
    differ = next(p for p in range(len(clean)) if clean[p] != corrupt[p])
    cells = zip(rng.integers(0, 30, 4), rng.integers(0, len(clean), 4), strict=True)
    for layer, p in [(0, differ), *cells]:
        want = _hand_residual(model, anatomy, corrupt, blocks[layer][p], layer, p, metric)
        assert result.residual[layer, p] == pytest.approx(want, abs=1e-4), (layer, p)
    for layer, head in zip(rng.integers(0, 30, 3), rng.integers(0, 9, 3), strict=True):
        want = _hand_head(model, anatomy, corrupt, projs[layer], layer, head, metric)
        assert result.heads[layer, head] == pytest.approx(want, abs=1e-4), (layer, head)
    assert result.residual[0, differ] == pytest.approx(result.clean, abs=1e-3)


def test_the_sweep_refuses_unequal_prompts_and_stops_when_cancelled(setup: Any) -> None:
    model, clean, corrupt = setup
    with pytest.raises(PromptError, match="as many tokens"):
        patching_sweep(model, clean, corrupt[:-1], Metric(1))
    cancel, seen = threading.Event(), []

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        cancel.set()

    with pytest.raises(Cancelled):
        patching_sweep(model, clean, corrupt, Metric(1), cancel=cancel, progress=progress)
    heads = getattr(model.config, "num_attention_heads", None) or 1  # Mamba's: none
    cells = model.config.num_hidden_layers * (len(clean) + heads)
    assert len(seen) == 1 and 0 < seen[0][0] < cells and seen[0][1] == cells


def test_the_probability_metric_is_the_softmax() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    assert float(Metric(2).of(logits)[0]) == pytest.approx(float(torch.softmax(logits, -1)[0, 2]))
    assert float(Metric(2, 0).of(logits)[0]) == pytest.approx(2.0)
