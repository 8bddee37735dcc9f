"""The Tokens card: the token sequence, and the selected token's id and place in it."""

from __future__ import annotations

from collections.abc import Sequence

from llm_lens.core.cards.common import Explainer, q


def tokens_card(
    texts: Sequence[str], ids: Sequence[int], n_prompt: int, position: int, model: str
) -> Explainer:
    """The token sequence, and the selected token's id and place in it."""
    shows = (
        "Each chip is one token id of the model's vocabulary: the prompt (chat template "
        "included) and then the response, each chip coloured by the probability the model "
        "gave the token it chose."
    )
    headline = f"{model} read the prompt as {n_prompt} tokens and wrote {len(texts) - n_prompt}."
    numbers = []
    if 0 <= position < len(texts):
        part = "prompt" if position < n_prompt else f"response (step {position - n_prompt})"
        headline = (
            f"Token {position} is {q(texts[position])}, id {ids[position]}, in the {part}; "
            f"the prompt is {n_prompt} tokens."
        )
        numbers.append(f"{len(texts)} tokens in all, so the KV cache holds {len(texts)} rows.")
    return Explainer(
        headline, shows, tuple(numbers), (), "Click a chip: every pane highlights that token."
    )
