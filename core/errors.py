"""Errors a user can cause. Each carries a message meant to be shown as it is, never a traceback."""

from __future__ import annotations


class LensError(Exception):
    """Base of every error caused by user input (a model spec, a prompt, a setting, a file)."""


class ModelLoadError(LensError):
    """The model spec could not be turned into a loaded causal language model."""


class PromptError(LensError):
    """The prompt cannot be run (empty, or longer than the model's context)."""


class SamplingError(LensError):
    """A sampling setting is out of range."""


class Cancelled(LensError):
    """The user cancelled a long operation (a model load) before it finished."""


class NonFiniteError(LensError):
    """The model computed NaN or Inf: its weights or its arithmetic are broken (a bad
    conversion, a float16 overflow), not the sampler settings, so no token can be chosen.

    ``where`` names the first stage of the forward pass that held such a number (an
    embedding, a layer's attention, MLP, mixer or norm output, the final norm, the head) and
    ``positions`` the prompt or response positions where it did.
    """

    def __init__(self, value: str, step: int, where: str, positions: tuple[int, ...]) -> None:
        self.value, self.step, self.where, self.positions = value, step, where, positions
        at = f" ({_positions_text(positions)})" if positions else ""
        super().__init__(
            f"the model computed {value} at step {step}: first in {where}{at}; "
            "its numbers are broken, not the sampler settings"
        )


def _positions_text(positions: tuple[int, ...], shown: int = 4) -> str:
    """ "position 3", "positions 0-4" or "positions 0-4, 7, 9-12, 15 and 3 more"."""
    runs: list[list[int]] = []
    for p in sorted(set(positions)):
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:shown]]
    rest = sum(b - a + 1 for a, b in runs[shown:])
    more = f" and {rest} more" if rest else ""
    word = "position" if len(positions) == 1 else "positions"
    return f"{word} {', '.join(parts)}{more}"
