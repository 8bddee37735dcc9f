"""What every "how to read this" card is: an :class:`Explainer`, and the way a card writes a
token's text and a probability.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Explainer:
    """One card: its headline (a sentence with numbers), what it shows, more numbers, a try."""

    headline: str
    shows: str
    numbers: tuple[str, ...] = ()
    phenomena: tuple[str, ...] = ()
    try_this: str = ""


def q(text: str) -> str:
    """A token's text quoted so its spaces show: ' type'."""
    return "'" + text.replace("\n", "\\n").replace("\t", "\\t") + "'"


def count(n: int, noun: str) -> str:
    """'1 token', '3,434 tokens': the noun agrees with its number."""
    return f"{n:,} {noun}{'s' * (n != 1)}"


def p3(p: float) -> str:
    """A probability to three decimals, and '< 0.001' for one that would read 0.000; "not
    reported" for NaN (a server that sent no log-probabilities)."""
    if p != p:  # NaN
        return "not reported"
    return "< 0.001" if 0 < p < 0.0005 else f"{p:.3f}"


def pct(p: float) -> str:
    """91 %, 0.42 %, 3.1e-05 %: enough digits to be non-zero."""
    value = 100 * p
    if value >= 10 or value == 0:
        return f"{value:.0f} %"
    if value >= 0.1:
        return f"{value:.2g} %"
    return f"{value:.2g} %"
