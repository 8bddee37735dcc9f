"""The What-if card: a clean run says so; an intervened one lists its changes and, beside the
clean run's step of the same context, the chosen token's probability there (from its logits)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from llm_lens.core.cards import whatif_card


def _step(token_id: int, text: str, logits: list[float]) -> SimpleNamespace:
    values = np.asarray(logits, np.float64)
    prob = float(np.exp(values[token_id] - np.logaddexp.reduce(values)))
    return SimpleNamespace(index=0, token=SimpleNamespace(id=token_id, text=text), prob=prob,
                           logits=values)  # fmt: skip


def test_a_clean_run_and_an_intervened_one():
    assert "clean" in whatif_card([]).headline
    step = _step(1, " Paris", [0.0, 2.0, 1.0])
    clean = _step(2, " Rome", [0.0, 1.0, 2.0])
    card = whatif_card(["head 7.4 = 0", "forget token 3"], step, clean)
    assert "2 change(s): head 7.4 = 0, forget token 3" in card.headline
    before = np.exp(1.0) / (1 + np.exp(1.0) + np.exp(2.0))
    (line,) = card.numbers
    assert f"gave it {before:.3f}" in line and "' Rome'" in line
    assert f"p = {step.prob:.3f}" in line
    assert "no clean run" in whatif_card(["mlp 2 = 0"], step, None).numbers[0]
    assert step.prob == pytest.approx(np.exp(2.0) / (1 + np.exp(2.0) + np.exp(1.0)))
