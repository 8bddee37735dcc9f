"""Never a silent difference from the model: every family, traced with the capture on, chooses
the same greedy tokens from the same logits as the model alone (its own ``generate()`` with its
own eager attention, no hook and no LLM Lens attention function: the capture off).

Runs every family of ``tests/families.py``, ``tests/hybrid_families.py`` and
``tests/stream_families.py`` (tiny seeded models).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.families import FAMILIES, family_model
from tests.hybrid_families import HYBRIDS, hybrid_model
from tests.stream_families import STREAMS, stream_model

PROMPT = "The quick brown fox jumps over the lazy dog"
NEW = 5
ALL = [*FAMILIES, *HYBRIDS, *STREAMS]


def _model(name: str, tokenizer: Any) -> Any:
    if name in STREAMS:
        return stream_model(name, tokenizer)
    return family_model(name, tokenizer) if name in FAMILIES else hybrid_model(name, tokenizer)


def _capture_off(model: Any, ids: list[int]) -> tuple[list[int], list[np.ndarray]]:
    """The model's own greedy tokens and each step's logits, with its own eager attention."""
    model.set_attn_implementation("eager")
    prompt = torch.tensor([ids])
    with torch.inference_mode():
        out = model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW, do_sample=False,
            output_logits=True, return_dict_in_generate=True,
        )  # fmt: skip
    return out.sequences[0, len(ids) :].tolist(), [s[0].float().numpy() for s in out.logits]


@pytest.mark.parametrize("name", ALL)
def test_capture_on_and_off_give_the_same_tokens_and_logits(tokenizer: Any, name: str) -> None:
    engine = Engine(_model(name, tokenizer))
    prompt = engine.tokenize(PROMPT, chat=False)
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=NEW))
    run.run_all()
    assert (
        any(row.any() for step in run.steps for row in step.attention)
        or not any(engine.info.has_attention(i) for i in range(engine.info.num_layers))
        or engine.info.attention_note  # its own attention runs (DeepSeek-V4's), and it says so
    )  # the capture was on: attention rows were recorded wherever a layer has attention
    tokens, logits = _capture_off(engine.model, list(prompt.ids))
    assert run.generated_ids == tokens and len(tokens) >= 1
    for step, want in zip(run.steps, logits, strict=True):
        np.testing.assert_allclose(step.logits, want, atol=1e-4 * np.abs(want).max())
