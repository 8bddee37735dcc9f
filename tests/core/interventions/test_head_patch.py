"""A head patched from another prompt (``HeadPatch``, :func:`head_patch_from`) equals the same
change written by hand: the clean prompt's input to the attention output projection read with a
pre-hook, and head h's slice of it put into the corrupted prompt's by another pre-hook, on tiny
random models of several families; and a patching sweep's head cell is the metric of the
corrupted prompt run under the HeadPatch that cell stands for (what a click in the window adds).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.interventions import HeadPatch, InterventionError, applied, from_dict, to_spec
from llm_lens.core.interventions.places import out_projection
from llm_lens.core.interventions.steer import head_patch_from
from llm_lens.core.interventions.sweep import Metric, patching_sweep
from tests.families import family_model

CLEAN = "The Eiffel Tower is in the city of"
CORRUPT = "The Colosseum Tower is in the city of"
FAMILIES = ["llama3", "gpt2", "gpt_neox", "opt"]


@pytest.fixture(scope="module", params=FAMILIES)
def setup(request: Any, tokenizer: Any) -> tuple[Any, Anatomy, list[int], list[int]]:
    model = family_model(request.param, tokenizer).model
    a = tokenizer.encode(CLEAN, add_special_tokens=False)
    b = tokenizer.encode(CORRUPT, add_special_tokens=False)
    n = min(len(a), len(b))
    return model, Anatomy.of(model), a[:n], b[:n]


def _logits(model: Any, ids: list[int]) -> Any:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()


def _hand(model: Any, anatomy: Anatomy, clean: list[int], corrupt: list[int],
          layer: int, head: int) -> Any:  # fmt: skip
    """The corrupted run's last logits with head ``head`` of ``layer`` set to the clean run's."""
    heads = model.config.num_attention_heads
    proj = out_projection(anatomy, layer)
    kept: list[Any] = []
    grab = proj.register_forward_pre_hook(lambda _m, a: kept.append(a[0].clone()))
    _logits(model, clean)
    grab.remove()
    clean_in = kept[0].reshape(*kept[0].shape[:-1], heads, -1)  # (1, T, heads, head_dim)

    def put(_m: Any, args: Any) -> Any:
        x = args[0].reshape(*args[0].shape[:-1], heads, -1).clone()
        x[:, :, head] = clean_in[:, :, head]
        return (x.reshape(args[0].shape), *args[1:])

    handle = proj.register_forward_pre_hook(put)
    try:
        return _logits(model, corrupt)
    finally:
        handle.remove()


def test_head_patch_equals_a_hand_pre_hook(setup: Any) -> None:
    model, anatomy, clean, corrupt = setup
    layer, head = len(anatomy.layers) - 1, model.config.num_attention_heads - 1
    patch = head_patch_from(model, anatomy, layer, head, clean)
    assert patch.positions == tuple(range(len(clean)))
    with applied(model, [patch], anatomy):
        ours = _logits(model, corrupt)
    reference = _hand(model, anatomy, clean, corrupt, layer, head)
    np.testing.assert_allclose(ours.numpy(), reference.numpy(), atol=1e-4, rtol=0)
    plain = _logits(model, corrupt)  # the hooks are gone, and the patch changed something
    assert not torch.allclose(plain, reference, atol=1e-4)
    assert from_dict(patch.to_dict()) == patch


def test_sweep_head_cell_is_the_run_under_its_head_patch(setup: Any) -> None:
    model, anatomy, clean, corrupt = setup
    metric = Metric(5, 7)
    result = patching_sweep(model, clean, corrupt, metric, anatomy)
    layer, head = 1, 0
    with applied(model, [head_patch_from(model, anatomy, layer, head, clean)], anatomy):
        cell = float(metric.of(_logits(model, corrupt)[None])[0])
    assert cell == pytest.approx(result.heads[layer, head], abs=1e-4)


def test_bad_head_patches_are_one_line(setup: Any) -> None:
    model, anatomy, clean, _ = setup
    with pytest.raises(InterventionError, match="no head"):
        head_patch_from(model, anatomy, 0, 999, clean)
    with pytest.raises(InterventionError, match="one row per position"):
        HeadPatch(0, 0, (0, 1), ((1.0,),))
    wrong = HeadPatch(0, 0, (0,), ((1.0, 2.0, 3.0),))
    with pytest.raises(InterventionError, match="rows must have"), applied(model, [wrong]):
        pass
    assert to_spec(wrong) == "head:0.0@0=<3 numbers each>"
