"""The selftest's What-if check: every pane that marks an intervened run shows its mark for one
and none for a clean run.

The selftest runs the prompt clean (one token), then under a forgotten first token and, where
the model computes attention, a halved head; each pane is rendered at the prefill (a step the
clean run also made, so the marks that compare with it have something to compare) and asked
whether its mark shows: the What-if line of Embeddings, Positions, Experts, Sampling and Timing
(``widgets.whatif_mark.WhatIfMark``), the Logits pane's clean bars, the Layer stack's clean
norms, the Attention header's changed head, the KV cache's forgotten token, the Tokens pane's
struck chip and the What-if pane's own line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LINES = ("Embeddings", "Positions", "Experts", "Sampling", "Timing")  # their WhatIfMark


def _line(pane: Any, _ctl: Any) -> bool:
    return bool(pane.whatif_mark.isVisibleTo(pane))


def _clean_curve(pane: Any, _ctl: Any) -> bool:
    x, _y = pane.clean_curve.getData()
    return x is not None and len(x) > 0


def _kv(pane: Any, ctl: Any) -> bool:
    step = ctl.current_step()
    return step is not None and "forgotten token" in pane.formula_text(step)


def _whatif(pane: Any, _ctl: Any) -> bool:
    return bool(pane.shown_label.text().startswith("the run shown is intervened"))


MARKS: dict[str, Callable[[Any, Any], bool]] = {
    **dict.fromkeys(LINES, _line),
    "Logits": lambda pane, _ctl: pane.clean_ends is not None,
    "Layer stack": _clean_curve,
    "Attention": lambda pane, _ctl: "intervened" in pane.header.text(),
    "KV cache": _kv,
    "Tokens": lambda pane, _ctl: bool(pane.forgotten.positions),
    "What if?": _whatif,
}


def first_attention_layer(info: Any) -> int | None:
    """The first layer that computes attention (its heads can be changed); None: none does."""
    return next((n for n in range(info.num_layers) if info.has_attention(n)), None)


def selftest_changes(info: Any) -> list[Any]:
    """The selftest's interventions: the first token forgotten (every family the app loads
    takes it) and head 0 of the first attention layer halved (where the model has one)."""
    from llm_lens.core.interventions import Forget, HeadEdit

    layer = first_attention_layer(info)
    head = [] if layer is None else [HeadEdit(layer, 0, "scale", 0.5)]
    return [Forget(0), *head]


def pane_marks(window: Any) -> dict[str, bool]:
    """Whether each pane that marks What-if runs shows its mark for the selected step, each
    rendered first (the Attention pane on the changed head, if any)."""
    from llm_lens.core.interventions import HeadEdit

    ctl = window.controller
    attention = window.panes.get("Attention")
    changed = [i for i in ctl.interventions if isinstance(i, HeadEdit)]
    if attention is not None and changed:
        attention.layer_box.setValue(changed[0].layer)
        attention.head_box.setValue(changed[0].head)
    out = {}
    for title, shown in MARKS.items():
        pane = window.panes.get(title)
        if pane is None:
            continue
        pane.render_and_paint()
        out[title] = shown(pane, ctl)
    return out


def mark_problem(window: Any, intervened: bool) -> str:
    """'' when every pane marks the run as it should: shown when ``intervened`` (the Attention
    header only when a head was changed), hidden for a clean run; else the one line naming
    the panes that do not."""
    from llm_lens.core.interventions import HeadEdit

    marks = pane_marks(window)
    heads = any(isinstance(i, HeadEdit) for i in window.controller.interventions)
    expected = {t: intervened and (t != "Attention" or heads) for t in marks}
    wrong = sorted(t for t, shown in marks.items() if shown != expected[t])
    if not wrong:
        return ""
    if intervened:
        return f"panes that do not mark the intervened run: {', '.join(wrong)}"
    return f"panes that mark the clean run as intervened: {', '.join(wrong)}"
