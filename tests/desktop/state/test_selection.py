"""desktop.state.selection: one selected token, a position in what the model reads (the prompt's
tokens, then each step's chosen token), and the step that chose it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llm_lens.core.records import PromptTokens, TokenInfo
from llm_lens.desktop.state.selection import (
    context_tokens,
    first_position_of,
    resolve_token,
    selected_token,
    step_of,
    token_count,
)


def _shown(token: int = -1) -> SimpleNamespace:
    """A controller's view: a 3-token prompt and 2 steps (ids 10, 11, 12 then 20, 11)."""
    prompt = PromptTokens(
        "abc", "abc", False, tuple(TokenInfo(10 + i, c, c.encode()) for i, c in enumerate("abc"))
    )
    steps = [SimpleNamespace(token=TokenInfo(i, t, t.encode())) for i, t in ((20, "x"), (11, "b"))]
    return SimpleNamespace(prompt=prompt, steps=steps, token=token)


def test_no_prompt_is_no_token():
    empty = SimpleNamespace(prompt=None, steps=[], token=0)
    assert context_tokens(empty) == [] and token_count(empty) == 0
    assert selected_token(empty) is None and step_of(empty, 0) is None
    assert resolve_token(empty, 0, True) == (-1, None)


def test_positions_are_prompt_then_response():
    ctl = _shown()
    assert [t.id for t in context_tokens(ctl)] == [10, 11, 12, 20, 11]
    assert token_count(ctl) == 5
    assert [step_of(ctl, p) for p in range(6)] == [None, None, None, 0, 1, None]
    assert first_position_of(ctl, 11) == 1 and first_position_of(ctl, 20) == 3
    assert first_position_of(ctl, 99) == -1


@pytest.mark.parametrize(("token", "expected"), [(-1, None), (0, (0, 10)), (4, (4, 11)), (5, None)])
def test_the_selected_token_is_its_position_and_info(token, expected):
    got = selected_token(_shown(token))
    assert (got if got is None else (got[0], got[1].id)) == expected


def test_resolving_clamps_the_position_and_finds_its_step():
    ctl = _shown()
    assert resolve_token(ctl, 4, with_step=True) == (4, 1)
    assert resolve_token(ctl, 4, with_step=False) == (4, None)
    assert resolve_token(ctl, 1, with_step=True) == (1, None)  # a prompt token: no step
    assert resolve_token(ctl, 5, with_step=True) == (-1, None)  # past the last token
    assert resolve_token(ctl, -3, with_step=True) == (-1, None)
