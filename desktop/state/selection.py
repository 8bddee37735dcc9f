"""One selected token, shared by every pane.

The selection is a position in the sequence the model reads: 0 … n−1 are the prompt's tokens,
n + i is the response token chosen at step i. It lives in the controller's shown value
(``controller.token``, ``sig_token_selected``, ``request_select_token``) as the selected step
does; panes only reflect it, and write it back through ``request_select_token``.
"""

from __future__ import annotations

from typing import Any


def context_tokens(controller: Any) -> list[Any]:
    """``TokenInfo`` of prompt + response, in reading order."""
    prompt = controller.prompt
    if prompt is None:
        return []
    return list(prompt.tokens) + [s.token for s in controller.steps]


def token_count(controller: Any) -> int:
    prompt = controller.prompt
    return 0 if prompt is None else len(prompt) + len(controller.steps)


def step_of(controller: Any, position: int) -> int | None:
    """The step that chose the response token at ``position`` (None for a prompt token)."""
    prompt = controller.prompt
    if prompt is None or position < len(prompt):
        return None
    step = position - len(prompt)
    return step if step < len(controller.steps) else None


def selected_token(controller: Any) -> tuple[int, Any] | None:
    """(position, TokenInfo) of the selected token, or None."""
    tokens = context_tokens(controller)
    pos = controller.token
    return (pos, tokens[pos]) if 0 <= pos < len(tokens) else None


def first_position_of(controller: Any, token_id: int) -> int:
    """The first position holding ``token_id`` (-1 when it is not in prompt or response)."""
    for i, info in enumerate(context_tokens(controller)):
        if info.id == token_id:
            return i
    return -1


def resolve_token(controller: Any, position: int, with_step: bool) -> tuple[int, int | None]:
    """What ``Controller.request_select_token`` selects: ``position`` clamped (-1 when it is
    no token shown), and with ``with_step`` the step that chose it (None: no step to select)."""
    position = position if 0 <= position < token_count(controller) else -1
    return position, step_of(controller, position) if with_step else None
