"""``llm-lens patch``: the maps' shapes and a cell checked against a hooked run; a metric that
is not one token, or prompts of different lengths, is one line and exit 2."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from llm_lens.core.cli import main

CLEAN, CORRUPT = "The Eiffel Tower is in the city of", "The Colosseum is in the city of"


@pytest.mark.slow
def test_patch_writes_both_maps(tmp_path: Any, engine: Any) -> None:
    from llm_lens.core.interventions import ResidualPatch, applied
    from llm_lens.core.interventions.sweep import Metric

    out = tmp_path / "map.json"
    clean = engine.tokenize(CLEAN, chat=False)
    corrupt = engine.tokenize(CORRUPT, chat=False)
    assert len(clean) == len(corrupt)  # the pair is chosen to tokenize alike
    code = main(["patch", CLEAN, CORRUPT, "--raw", "--metric", " Paris", " Rome",
                 "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    residual, heads = np.array(data["residual"]), np.array(data["heads"])
    assert residual.shape == (30, len(clean)) and heads.shape == (30, 9)
    assert data["clean"] > data["corrupt"]  # the clean prompt favours " Paris" more
    # the first layer's input is the token's embedding: where both prompts have the same token,
    # patching it changes nothing
    same = [i for i in range(len(clean)) if clean.ids[i] == corrupt.ids[i]]
    np.testing.assert_allclose(residual[0, same], data["corrupt"], atol=1e-3)
    # one cell by the Patcher: the clean residual entering layer 5 at the changed position
    p = next(i for i in range(len(clean)) if clean.ids[i] != corrupt.ids[i])
    assert abs(residual[5, p] - data["corrupt"]) > 1e-2  # it matters
    kept: list[Any] = []
    hook = engine.anatomy.layers[5].register_forward_pre_hook(
        lambda _m, a, k: kept.append((a[0] if a else k["hidden_states"])[0, p].clone()),
        with_kwargs=True,
    )
    import torch

    with torch.inference_mode():
        engine.model(input_ids=torch.tensor([clean.ids]), use_cache=False)
        hook.remove()
        with applied(engine.model, [ResidualPatch(5, (p,), (tuple(kept[0].tolist()),))]):
            logits = engine.model(input_ids=torch.tensor([corrupt.ids]), use_cache=False).logits
    metric = Metric(data["metric"]["a"], data["metric"]["b"])
    assert residual[5, p] == pytest.approx(float(metric.of(logits[:, -1])[0]), abs=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--metric", " Parisian town"], "not one"),
        (["--metric", " Paris", " Rome", " Oslo"], "one or two tokens"),
    ],
)
def test_patch_mistakes_are_one_line(loaded: Any, capsys: Any, args: list[str], words: str) -> None:
    code = main(["patch", CLEAN, CORRUPT, "--raw", *args, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1


@pytest.mark.slow
def test_patch_refuses_prompts_of_different_lengths(loaded: Any, capsys: Any) -> None:
    code = main(["patch", CLEAN, "Rome", "--raw", "--metric", " Paris", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "as many tokens" in err
