"""A patching sweep's every cell equals one forward of the corrupted prompt with that one place
replaced by the clean run's value, written by hand here (a pre-hook on the block, or on the
attention output projection); the clean and corrupted metrics are the plain runs'."""

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

CLEAN = "The Eiffel Tower is in the city of"
CORRUPT = "The Colosseum Tower is in the city of"


@pytest.fixture(scope="module", params=["llama3", "gpt2", "qwen2"])
def setup(request: Any, tokenizer: Any) -> tuple[Any, list[int], list[int]]:
    model = family_model(request.param, tokenizer).model
    clean = tokenizer.encode(CLEAN, add_special_tokens=False)
    corrupt = tokenizer.encode(CORRUPT, add_special_tokens=False)
    n = min(len(clean), len(corrupt))
    return model, clean[:n], corrupt[:n]


def _metric_of(model: Any, ids: list[int], metric: Metric) -> float:
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[:, -1]
    return float(metric.of(logits)[0])


def _clean_inputs(model: Any, anatomy: Anatomy, ids: list[int]) -> tuple[list[Any], list[Any]]:
    """The clean run's input to each block and to each attention output projection (T, …)."""
    blocks: list[Any] = []
    projs: list[Any] = []
    handles = [
        layer.register_forward_pre_hook(
            lambda _m, a, k: blocks.append((a[0] if a else k["hidden_states"])[0].clone()),
            with_kwargs=True,
        )
        for layer in anatomy.layers
    ] + [
        out_projection(anatomy, i).register_forward_pre_hook(
            lambda _m, a: projs.append(a[0][0].clone())
        )
        for i in range(len(anatomy.layers))
    ]
    _metric_of(model, ids, Metric(0))
    for h in handles:
        h.remove()
    return blocks, projs


def test_every_cell_equals_one_hand_hooked_forward(setup: Any) -> None:
    model, clean, corrupt = setup
    anatomy, metric = Anatomy.of(model), Metric(11, 22)
    result = patching_sweep(model, clean, corrupt, metric)
    blocks, projs = _clean_inputs(model, anatomy, clean)
    heads = model.config.num_attention_heads
    assert result.residual.shape == (len(anatomy.layers), len(clean))
    assert result.heads.shape == (len(anatomy.layers), heads)
    assert result.clean == pytest.approx(_metric_of(model, clean, metric), abs=1e-4)
    assert result.corrupt == pytest.approx(_metric_of(model, corrupt, metric), abs=1e-4)
    for layer in range(len(anatomy.layers)):
        for p in range(len(clean)):

            def resid(_m: Any, a: Any, k: Any, p: int = p, layer: int = layer) -> Any:
                h = (a[0] if a else k["hidden_states"]).clone()
                h[0, p] = blocks[layer][p]
                return ((h, *a[1:]), k) if a else (a, k | {"hidden_states": h})

            handle = anatomy.layers[layer].register_forward_pre_hook(resid, with_kwargs=True)
            want = _metric_of(model, corrupt, metric)
            handle.remove()
            assert result.residual[layer, p] == pytest.approx(want, abs=1e-4)
        for head in range(heads):

            def one_head(_m: Any, a: Any, head: int = head, layer: int = layer) -> Any:
                x = a[0].clone()
                width = x.shape[-1] // heads
                part = slice(head * width, (head + 1) * width)
                x[0, :, part] = projs[layer][:, part]
                return (x, *a[1:])

            handle = out_projection(anatomy, layer).register_forward_pre_hook(one_head)
            want = _metric_of(model, corrupt, metric)
            handle.remove()
            assert result.heads[layer, head] == pytest.approx(want, abs=1e-4)
    # where the prompts differ, patching the first layer's input restores something
    differ = [p for p in range(len(clean)) if clean[p] != corrupt[p]]
    assert not np.allclose(result.residual[0, differ], result.corrupt, atol=1e-6)


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
    assert seen == [(3, 2 + 2 * model.config.num_hidden_layers)]


def test_the_probability_metric_is_the_softmax() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    assert float(Metric(2).of(logits)[0]) == pytest.approx(float(torch.softmax(logits, -1)[0, 2]))
    assert float(Metric(2, 0).of(logits)[0]) == pytest.approx(2.0)
