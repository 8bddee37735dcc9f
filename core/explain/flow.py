"""Information-flow routes (Ferrando & Voita 2024) back from the chosen token.

Every residual state is a sum of parts: after layer l's attention, position i holds
``mid_i = pre_i + Σ_j z_ij (+ bias)`` where ``z_ij = Σ_h A_h[i, j] W_O[:, h] v_h[j]`` is what
source token j sent through all heads; after its MLP, ``pre'_i = mid_i + mlp_i``. A part z of
a sum y matters by its proximity ``max(0, ‖y‖₁ − ‖y − z‖₁)``, normalised over the parts of y.
Walking down from the last layer's last position and keeping parts above a floor gives a graph
over levels × positions (level 2l: entering layer l; 2l + 1: after its attention).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llm_lens.core.explain.hooks import out_projection, out_weight
from llm_lens.core.explain.trace import ContextTrace
from llm_lens.core.placement import weights_of
from llm_lens.core.records import frozen

KINDS = ("attn", "residual", "mlp")
PART_BUDGET = 1 << 20  # floats in one (rows, T, hidden) block of parts (4 MB, cache-sized):
# rows are taken this many at a time, so the graph's memory does not grow with rows × T × hidden


@dataclass(frozen=True)
class FlowGraph:
    """Edges of the information flow kept at ``floor``; nodes are (level, position).

    An edge runs from a lower level to a higher one: ``attn`` (2l, j) → (2l+1, i),
    ``residual`` (2l, i) → (2l+1, i) or (2l+1, i) → (2l+2, i), ``mlp`` (2l+1, i) → (2l+2, i).
    ``head_shares`` splits an attention edge over heads by ‖A_h[i, j] W_O[:, h] v_h[j]‖₁.
    """

    num_layers: int
    num_heads: int
    tokens: tuple[str, ...]
    floor: float
    kind: np.ndarray  # (E,) int8 index into KINDS
    src_level: np.ndarray  # (E,) int32
    src_pos: np.ndarray  # (E,) int32
    dst_level: np.ndarray  # (E,) int32
    dst_pos: np.ndarray  # (E,) int32
    weight: np.ndarray  # (E,) float32 importance in [0, 1]
    head_shares: np.ndarray  # (E, heads) float32, zero rows for non-attention edges

    @property
    def top_level(self) -> int:
        return 2 * self.num_layers

    def kept(self, threshold: float) -> np.ndarray:
        """(E,) bool: the edges on a route from the output whose every edge is ≥ ``threshold``."""
        keep = np.zeros(len(self.weight), bool)
        reached = {(self.top_level, len(self.tokens) - 1)}
        order = np.argsort(-self.dst_level, kind="stable")
        for e in order:
            dst = (int(self.dst_level[e]), int(self.dst_pos[e]))
            if self.weight[e] >= threshold and dst in reached:
                keep[e] = True
                reached.add((int(self.src_level[e]), int(self.src_pos[e])))
        return keep

    def as_dict(self, threshold: float) -> dict[str, Any]:
        """``nodes`` and ``edges`` of the routes kept at ``threshold`` (for the JSON output)."""
        keep = np.flatnonzero(self.kept(threshold))
        ends = {(int(self.src_level[e]), int(self.src_pos[e])) for e in keep}
        ends |= {(int(self.dst_level[e]), int(self.dst_pos[e])) for e in keep}
        ends.add((self.top_level, len(self.tokens) - 1))
        nodes = sorted(ends)
        ids = {n: i for i, n in enumerate(nodes)}
        return {
            "threshold": threshold,
            "nodes": [
                {
                    "id": ids[n],
                    "layer": n[0] // 2,
                    "stage": "mid" if n[0] % 2 else "pre",
                    "position": n[1],
                    "text": self.tokens[n[1]],
                }
                for n in nodes
            ],  # fmt: skip
            "edges": [self._edge(int(e), ids) for e in keep],
        }

    def _edge(self, e: int, ids: dict[tuple[int, int], int]) -> dict[str, Any]:
        kind = KINDS[int(self.kind[e])]
        shares = self.head_shares[e]
        return {
            "source": ids[(int(self.src_level[e]), int(self.src_pos[e]))],
            "target": ids[(int(self.dst_level[e]), int(self.dst_pos[e]))],
            "kind": kind,
            "layer": int(self.src_level[e]) // 2,
            "head": int(shares.argmax()) if kind == "attn" else None,
            "weight": float(self.weight[e]),
            "heads": [float(s) for s in shares] if kind == "attn" else None,
        }


def importance(parts: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """(..., parts) proximity shares of ``parts`` (..., parts, hidden) in ``total``."""
    prox = proximity(parts, total)  # (..., parts)
    return prox / prox.sum(-1, keepdim=True).clamp(min=1e-12)


def proximity(parts: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """(..., parts) ``max(0, ‖y‖₁ − ‖y − z‖₁)`` of each part z (..., parts, hidden) of y."""
    y = total.unsqueeze(-2)  # (..., 1, hidden)
    return (y.abs().sum(-1) - (y - parts).abs().sum(-1)).clamp(min=0)


def row_chunk(tokens: int, hidden: int, budget: int = PART_BUDGET) -> int:
    """Query rows per block so that one (rows, T, hidden) block of parts fits ``budget``."""
    return max(1, budget // max(1, tokens * hidden))


class _Edges:
    def __init__(self, heads: int) -> None:
        self.rows: list[tuple[int, int, int, int, int, float]] = []
        self.shares: list[np.ndarray] = []
        self.zero = np.zeros(heads, np.float32)

    def add(self, kind: int, src: tuple[int, int], dst: tuple[int, int], w: float) -> None:
        self.rows.append((kind, *src, *dst, w))
        self.shares.append(self.zero)


def flow_graph(
    engine: Any, trace: ContextTrace, floor: float = 0.01, budget: int = PART_BUDGET
) -> FlowGraph:
    """Walk down from the last position of the last layer, keeping parts ≥ ``floor``.

    One layer's attention weights are held at a time, and the parts of at most ``budget``
    floats (rows × T × hidden) at once: the memory is bounded by one layer, not the model."""
    info = engine.info
    layers, tokens = info.num_layers, trace.pre.shape[1]
    edges = _Edges(info.num_heads)
    active = {tokens - 1}
    rows = row_chunk(tokens, trace.pre.shape[-1], budget)
    with torch.no_grad(), trace.eager():
        for layer in reversed(range(layers)):
            mids = _mlp_half(trace, layer, sorted(active), floor, edges)
            with weights_of(engine.model, engine.anatomy.layers[layer]):  # where offloaded
                active = _attn_half(engine, trace, layer, mids, floor, edges, rows)
    return _freeze(info, trace, engine, floor, edges)


def _mlp_half(
    trace: ContextTrace, layer: int, rows: list[int], floor: float, out: _Edges
) -> set[int]:
    idx = torch.tensor(rows)
    post, mid = trace.pre[layer + 1, idx], trace.pre[layer, idx] + trace.attn[layer, idx]
    imp = importance(torch.stack([mid, post - mid], dim=1), post).cpu().numpy()  # (R, 2)
    reached: set[int] = set()
    for r, i in enumerate(rows):
        for part, kind in ((0, 1), (1, 2)):
            if imp[r, part] >= floor:
                out.add(kind, (2 * layer + 1, i), (2 * layer + 2, i), float(imp[r, part]))
                reached.add(i)
    return reached


def _per_head_out(engine: Any, trace: ContextTrace, layer: int) -> torch.Tensor:
    """(heads, T, hidden): what each head would write for each source token at weight 1."""
    attn, info = engine.anatomy.attn[layer], engine.info
    w = out_weight(attn).float()
    heads = info.heads_in(layer)  # this layer's own query heads (Inkling's differ)
    w_o = w.view(w.shape[0], heads, -1)  # (hidden, H, hd)
    values = trace.layer_values(layer)  # (this layer's own K/V heads, T, hd): MiMo's differ
    v = values.repeat_interleave(heads // values.shape[0], dim=0)  # (H, T, hd)
    return torch.einsum("htk,dhk->htd", v, w_o)


def _attn_half(
    engine: Any,
    trace: ContextTrace,
    layer: int,
    rows: set[int],
    floor: float,
    out: _Edges,
    chunk_rows: int,
) -> set[int]:
    weights = trace.weights(layer)  # (H, T, T), this layer's only (recomputed first)
    u = _per_head_out(engine, trace, layer)  # (H, T, hidden)
    bias = getattr(out_projection(engine.anatomy.attn[layer]), "bias", None)
    reached: set[int] = set()
    ordered = sorted(rows)
    for start in range(0, len(ordered), chunk_rows):
        chunk = ordered[start : start + chunk_rows]
        idx = torch.tensor(chunk)
        span = chunk[-1] + 1  # causal: no row of the block reads past its last one
        a = weights[:, idx, :span]  # (H, R, S)
        diag = trace.post_diag(layer, idx)  # (R, hidden): a post-norm held at its scale
        z = torch.einsum("hrt,htd->rtd", a, u[:, :span])  # (R, S, hidden)
        if diag is not None:
            z *= diag[:, None]
        mid = trace.pre[layer, idx] + trace.attn[layer, idx]  # (R, hidden)
        prox = [proximity(trace.pre[layer, idx][:, None], mid), proximity(z, mid)]
        del z
        if bias is not None:
            b = bias.float().expand(len(chunk), -1)  # (R, hidden)
            prox.append(proximity((b if diag is None else b * diag)[:, None], mid))
        p = torch.cat(prox, dim=1)  # (R, 1 + S (+ 1))
        imp = (p / p.sum(-1, keepdim=True).clamp(min=1e-12)).cpu().numpy()
        shares = _head_shares(a, u[:, :span], diag).cpu().numpy()  # (H, R, S)
        for r, i in enumerate(chunk):
            if imp[r, 0] >= floor:
                out.add(1, (2 * layer, i), (2 * layer + 1, i), float(imp[r, 0]))
                reached.add(i)
            for j in np.flatnonzero(imp[r, 1 : i + 2] >= floor).tolist():  # j ≤ i
                out.add(0, (2 * layer, j), (2 * layer + 1, i), float(imp[r, 1 + j]))
                out.shares[-1] = out.zero.copy()  # a layer's own heads, the rest zero
                out.shares[-1][: len(shares)] = shares[:, r, j]
                reached.add(j)
    return reached


def _head_shares(a: torch.Tensor, u: torch.Tensor, diag: torch.Tensor | None) -> torch.Tensor:
    """(H, R, T) each head's share of ‖A_h[i, j] W_O[:, h] v_h[j]‖₁ (through the post-norm)."""
    if diag is None:
        norms = a * u.abs().sum(-1)[:, None]  # (H, R, T)
    else:
        norms = a * torch.einsum("htd,rd->hrt", u.abs(), diag.abs())
    return norms / norms.sum(0, keepdim=True).clamp(min=1e-12)


def empty_graph(engine: Any, ids: Any) -> FlowGraph:
    """A graph with no edges over ``ids`` (a model whose logit does not split: :mod:`.partial`)."""
    none = np.zeros(0)
    return FlowGraph(
        num_layers=engine.info.num_layers, num_heads=engine.info.num_heads,
        tokens=tuple(engine.texts.text(int(i)) for i in ids), floor=1.0,
        kind=frozen(none, np.int8), src_level=frozen(none, np.int32),
        src_pos=frozen(none, np.int32), dst_level=frozen(none, np.int32),
        dst_pos=frozen(none, np.int32), weight=frozen(none, np.float32),
        head_shares=frozen(np.zeros((0, engine.info.num_heads)), np.float32),
    )  # fmt: skip


def _freeze(info: Any, trace: ContextTrace, engine: Any, floor: float, e: _Edges) -> FlowGraph:
    rows = np.array(e.rows, np.float64).reshape(-1, 6)
    shares = np.stack(e.shares) if e.shares else np.zeros((0, info.num_heads))
    return FlowGraph(
        num_layers=info.num_layers,
        num_heads=info.num_heads,
        tokens=tuple(engine.texts.text(int(i)) for i in trace.ids.cpu().numpy()),
        floor=floor,
        kind=frozen(rows[:, 0], np.int8),
        src_level=frozen(rows[:, 1], np.int32),
        src_pos=frozen(rows[:, 2], np.int32),
        dst_level=frozen(rows[:, 3], np.int32),
        dst_pos=frozen(rows[:, 4], np.int32),
        weight=frozen(rows[:, 5], np.float32),
        head_shares=frozen(shares, np.float32),
    )
