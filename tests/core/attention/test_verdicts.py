"""The reproduce check runs once per weights: a second Engine over the same weights (a reload,
a switch back) reuses its verdict; other weights, or weights with no identity, are checked."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from llm_lens.core.attention import lens, verdicts
from llm_lens.core.loading import LoadedModel
from llm_lens.core.loop.engine import Engine
from tests.conftest import make_tiny


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each call of the check, by the model's weights id; the verdicts forgotten before/after."""
    calls: list[str] = []
    real = lens.reproduces

    def counted(model: Any, tolerance: float = 1e-3) -> bool:
        calls.append(str(getattr(model, "_test_weights", "")))
        return real(model, tolerance)

    monkeypatch.setattr(lens, "reproduces", counted)
    monkeypatch.setattr(verdicts, "_VERDICTS", {})
    return calls


def _loaded(tokenizer: Any, weights_id: str) -> LoadedModel:
    tiny = make_tiny(tokenizer)
    tiny.model._test_weights = weights_id
    return LoadedModel(tiny.model, tiny.tokenizer, replace(tiny.info, weights_id=weights_id))


def test_the_same_weights_are_checked_once(tokenizer: Any, checks: list[str]) -> None:
    first = Engine(_loaded(tokenizer, "w1"))
    again = Engine(_loaded(tokenizer, "w1"))  # reloaded: a new model object, the same weights
    assert checks == ["w1"]
    assert first.attention_maps and again.attention_maps  # both route through the lens
    assert again.model.config._attn_implementation == lens.ATTN_IMPLEMENTATION
    Engine(_loaded(tokenizer, "w2"))
    assert checks == ["w1", "w2"]


def test_weights_without_an_identity_are_checked_each_time(
    tokenizer: Any, checks: list[str]
) -> None:
    Engine(_loaded(tokenizer, ""))
    Engine(_loaded(tokenizer, ""))
    assert checks == ["", ""]


def test_a_refusal_is_remembered_and_applied(
    tokenizer: Any, checks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Weights whose logits differ through the lens keep their own eager attention on reload,
    without a second check, and the Attention pane says why."""
    monkeypatch.setattr(lens, "reproduces", lambda model, tolerance=1e-3: checks.append("x") or 0)
    Engine(_loaded(tokenizer, "w3"))
    again = Engine(_loaded(tokenizer, "w3"))
    assert checks == ["x"]
    assert not again.attention_maps
    assert again.model.config._attn_implementation == "eager"
    assert "does not reproduce" in again.info.attention_note
