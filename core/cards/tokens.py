"""The Tokens card: the token sequence, and the selected token's id and place in it."""

from __future__ import annotations

from collections.abc import Sequence

from llm_lens.core.cards.common import Explainer, count, q


def tokens_card(
    texts: Sequence[str], ids: Sequence[int], n_prompt: int, position: int, model: str
) -> Explainer:
    """The token sequence, and the selected token's id and place in it."""
    shows = (
        "Each chip is one token id of the model's vocabulary: the prompt (chat template "
        "included) and then the response, each chip coloured by the probability the model "
        "gave the token it chose."
    )
    headline = (
        f"{model} read the prompt as {count(n_prompt, 'token')} and wrote {len(texts) - n_prompt}."
    )
    numbers = []
    if 0 <= position < len(texts):
        part = "prompt" if position < n_prompt else f"response (step {position - n_prompt})"
        headline = (
            f"Token {position} is {q(texts[position])}, id {ids[position]}, in the {part}; "
            f"the prompt is {count(n_prompt, 'token')}."
        )
        numbers.append(
            f"{count(len(texts), 'token')} in all, so the KV cache holds "
            f"{count(len(texts), 'row')}."
        )
    return Explainer(
        headline, shows, tuple(numbers), (), "Click a chip: every pane highlights that token."
    )
