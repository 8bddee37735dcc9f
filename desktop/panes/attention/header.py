"""The Attention pane's header line: which head is shown and what it shares (GQA, MQA), the
step, a sliding window, a layer with no attention, pooling and contrast, in words."""

from __future__ import annotations

from typing import Any


def gqa_note(info: Any, head: int, layer: int | None = None) -> str:
    """'head 4 shares KV head 1 with heads 3, 5 (GQA 9:3)' for a grouped-query model (of
    ``layer``'s own heads where layers' counts differ: MiMo, Inkling)."""
    groups = info.gqa_groups if layer is None else info.gqa_groups_in(layer)
    kind = info.head_sharing
    if groups is not info.gqa_groups:
        heads, kv = sum(len(g) for g in groups), len(groups)
        kind = "MHA" if kv >= heads else ("MQA" if kv == 1 else f"GQA {heads}:{kv}")
    for kv, group in enumerate(groups):
        if head in group:
            others = [str(h) for h in group if h != head]
            if not others:
                return f"head {head} has its own KV head {kv} ({kind})"
            if kind == "MQA":
                return f"head {head} shares the one KV head with all {len(group)} heads (MQA)"
            return f"head {head} shares KV head {kv} with heads {', '.join(others)} ({kind})"
    return ""


def no_attention_note(kind: str) -> str:
    """Why a layer of a hybrid or state-space model has no attention map (one line)."""
    return (
        f"this layer is a {kind} layer: it mixes tokens through a running state, not weights "
        "over the earlier tokens, so it has no attention map (its rows stay empty)"
    )


def map_note(info: Any, layer: int, amap: Any, block: int, waiting: str, head: int = 0) -> str:
    """What the map is or why there is none: a layer without attention, a head past the
    layer's own count (Inkling's layers differ), a map still being computed (``waiting``),
    or one max-pooled in blocks of ``block`` positions, and where a block holds several
    attention sublayers (LongCat-Flash), that the map is its first's."""
    if info.attention_note:
        return str(info.attention_note)
    if not info.has_attention(layer):
        return no_attention_note(info.layer_kinds[layer])
    if head >= info.heads_in(layer):
        return (
            f"layer {layer} has {info.heads_in(layer)} query heads (0-"
            f"{info.heads_in(layer) - 1}), not {info.num_heads}: head {head} is not one of them"
        )
    if amap is None:
        return waiting
    notes = []
    if info.sublayers > 1:  # LongCat-Flash: the block's second attention is not drawn
        notes.append(
            f"the first of this block's {info.sublayers} attention sublayers (the others "
            "attend too, each with its own cache layer; their maps are not drawn)"
        )
    if block > 1:
        notes.append(f"max-pooled in blocks of {block} positions")
    return " · ".join(notes)


def has_rows(steps: Any, layer: int, head: int) -> bool:
    """True when the run brought back ``(layer, head)``'s rows (a softmax row sums to 1; a
    head an engine did not send stays zero)."""
    attention = steps[0].attention if steps else None
    if attention is None or attention.ndim != 3 or attention.shape[2] == 0:
        return False  # a served run's: no rows at all
    inside = layer < attention.shape[0] and head < attention.shape[1]
    return inside and float(attention[layer, head].sum()) > 0.5


def rows_note(head_rows: bool) -> str:
    """What a map of brought-back rows shows, and how the next run gets more heads."""
    note = "rows brought back for the heads you open: the prompt's last token's and each new "
    note += "token's (the prompt's other rows stayed on the server)"
    return note + ("; another head's rows come with the next run" if head_rows else "")


def next_run_line(layer: int, head: int, why: str) -> str:
    """The pane's line for a head the shown run did not bring back."""
    return f"layer {layer}, head {head}: its rows come with the next run (Ctrl+Enter). {why}"
