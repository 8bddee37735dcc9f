"""How a model tells positions apart, read from the model itself.

Four schemes exist among decoder-only transformers, and the Positions pane draws whichever the
loaded model uses:

- ``rope``: queries and keys are rotated pair by pair by ``position × inv_freq``. The frequencies
  and the angles are read from the model's own rotary module (its ``inv_freq`` buffer and the
  cos/sin it returns), so llama3 / linear / dynamic / YaRN scaling, partial rotary (NeoX,
  StableLM, Phi: only the first ``rotary_dim`` of ``head_dim`` are rotated) and per-layer-type
  settings (Gemma 3: a local and a global base) are as the model applies them.
- ``learned``: a table of vectors, one per position, added to the token embeddings (GPT-2's
  ``wpe``, OPT's ``embed_positions`` with its offset of 2).
- ``alibi``: no position vector at all; each head adds ``slope × key position`` to its scores
  (Bloom, Falcon with ``alibi``). The slopes come from the model's own ``build_alibi_tensor``.
- ``none``.
"""

from __future__ import annotations

import inspect
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_lens.core.anatomy import model_wide
from llm_lens.core.placement import weights_of
from llm_lens.core.records import frozen

ROPE, LEARNED, ALIBI, NONE = "rope", "learned", "alibi", "none"
MAX_DISTANCE = 512  # distances drawn in the q·k-vs-distance curve
_LEARNED_NAMES = ("wpe", "embed_positions", "position_embeddings")


@dataclass(frozen=True)
class RopeSet:
    """One set of rotary settings and the rotation it gives each position.

    A model has one set, or one per layer type (Gemma 3: ``sliding_attention`` layers use a
    local base, ``full_attention`` layers a global one).
    """

    layer_type: str  # "" when every layer shares the set
    layers: tuple[int, ...]  # the layers that use it
    rope_type: str  # default, llama3, linear, dynamic, yarn, ...
    theta: float | None  # the config's base, for the label only
    head_dim: int
    rotary_dim: int  # dimensions rotated (= head_dim unless partial rotary)
    attention_scaling: float  # the module's factor on cos and sin (YaRN's mscale; else 1)
    inv_freq: np.ndarray  # (rotary_dim / 2,) radians per position, the module's buffer
    angles: np.ndarray  # (positions, rotary_dim / 2) radians in [0, 2π), from its cos and sin
    distances: np.ndarray  # (d,)
    score_vs_distance: np.ndarray  # (d,) q·k of a fixed all-ones q and k rotated d apart

    @property
    def pairs(self) -> int:
        return int(self.inv_freq.shape[0])

    @property
    def wavelengths(self) -> np.ndarray:
        """(pairs,) tokens per full turn of each pair: 2π / inv_freq."""
        out: np.ndarray = 2 * np.pi / self.inv_freq.astype(np.float64)
        return out


@dataclass(frozen=True)
class LearnedTable:
    """The learned position vectors the model adds for positions 0 … n-1."""

    table: np.ndarray  # (positions, hidden) float32: the rows added to the token embeddings
    similarity: np.ndarray  # (positions, positions) float32: cosine similarity between rows
    offset: int  # rows skipped before position 0 (OPT: 2)
    table_size: int  # positions the table has in all
    module: str  # where it lives in the model, e.g. transformer.wpe


@dataclass(frozen=True)
class AlibiSlopes:
    """ALiBi: head h adds ``slope[h] × key position × bias_scale`` to its attention scores."""

    slopes: np.ndarray  # (heads,) float32, as the model's build_alibi_tensor makes them
    bias_scale: float  # Falcon divides the bias by √head_dim; 1 elsewhere


@dataclass(frozen=True)
class PositionView:
    """What the Positions pane draws for one model and a number of positions."""

    kind: str  # rope, learned, alibi or none
    positions: int
    rope: tuple[RopeSet, ...] = ()
    learned: LearnedTable | None = None
    alibi: AlibiSlopes | None = None


def position_view(model: Any, positions: int) -> PositionView:
    """The position scheme ``model`` uses, for positions 0 … ``positions``-1."""
    import torch

    n = max(int(positions), 1)
    cfg = model.config.get_text_config(decoder=True)
    with torch.inference_mode():
        if _uses_alibi(cfg):
            return PositionView(ALIBI, n, alibi=_alibi(model, cfg))
        rotary = _rotary_module(model)
        if rotary is not None:
            with weights_of(model, rotary):  # where a device map offloaded it
                return PositionView(ROPE, n, rope=_rope_sets(rotary, cfg, n))
        learned = _learned_module(model)
        if learned is not None:
            with weights_of(model, learned[1]):
                return PositionView(LEARNED, n, learned=_learned(*learned, n))
    return PositionView(NONE, n)


# ----------------------------------------------------------------------- rope
def _rotary_module(model: Any) -> Any | None:
    """The shallowest module that holds rotary frequencies (``inv_freq`` or ``<type>_inv_freq``)."""
    found = [
        (name.count("."), module)
        for name, module in model.named_modules()
        if any(b.endswith("inv_freq") for b, _ in module.named_buffers(recurse=False))
    ]
    return min(found, key=lambda f: f[0])[1] if found else None


def _layer_types(rotary: Any, cfg: Any) -> list[str]:
    """The layer types with their own rotary buffers, or [""] for a single set."""
    if "layer_type" not in inspect.signature(rotary.forward).parameters:
        return [""]
    types = getattr(rotary, "layer_types", None) or sorted(set(cfg.layer_types))
    return [t for t in types if hasattr(rotary, f"{t}_inv_freq")]


def _rope_sets(rotary: Any, cfg: Any, n: int) -> tuple[RopeSet, ...]:
    num_layers = int(cfg.num_hidden_layers)
    layer_types = list(getattr(cfg, "layer_types", None) or [])
    sets = []
    for lt in _layer_types(rotary, cfg):
        layers = tuple(i for i in range(num_layers) if not lt or layer_types[i] == lt)
        sets.append(_rope_set(rotary, cfg, lt, layers, n))
    return tuple(sets)


def _rope_set(rotary: Any, cfg: Any, lt: str, layers: tuple[int, ...], n: int) -> RopeSet:
    """Call the rotary module for positions 0 … n-1 exactly as the model's forward does."""
    import torch

    prefix = f"{lt}_" if lt else ""
    buffer = getattr(rotary, f"{prefix}inv_freq")
    x = torch.zeros(1, dtype=torch.float32, device=buffer.device)  # only its dtype and device count
    position_ids = torch.arange(n, device=buffer.device)[None]  # (1, n)
    out = rotary(x, position_ids, lt) if lt else rotary(x, position_ids)  # (1, n, rotary_dim)
    # Llama 4's module returns the rotation as one complex tensor, cos + i·sin (1, n, pairs)
    cos, sin = (out.real, out.imag) if torch.is_tensor(out) and out.is_complex() else out
    inv_freq = getattr(rotary, f"{prefix}inv_freq").double().cpu().numpy()  # after dynamic update
    pairs = inv_freq.shape[0]
    cos_np = cos[0, :, :pairs].double().cpu().numpy()  # (n, pairs): the first half of cat(f, f)
    sin_np = sin[0, :, :pairs].double().cpu().numpy()
    scaling = float(getattr(rotary, f"{prefix}attention_scaling", 1.0))
    rope_type = getattr(rotary, "rope_type", "default")
    rope_type = rope_type.get(lt, "default") if isinstance(rope_type, dict) else rope_type
    head_dim = model_wide(cfg, "head_dim") or cfg.hidden_size // cfg.num_attention_heads
    d = np.arange(MAX_DISTANCE, dtype=np.float64)
    # q·k with q = k = ones, rotated d apart: each pair contributes 2·cos(d·θ_i)·scaling²
    score = 2 * scaling**2 * np.cos(np.outer(d, inv_freq)).sum(axis=1)
    return RopeSet(
        layer_type=lt,
        layers=layers,
        rope_type=str(rope_type),
        theta=_theta(cfg, lt),
        head_dim=int(head_dim),
        rotary_dim=2 * pairs,
        attention_scaling=scaling,
        inv_freq=frozen(inv_freq, np.float32),
        angles=frozen(np.mod(np.arctan2(sin_np, cos_np), 2 * np.pi), np.float32),
        distances=frozen(d, np.float32),
        score_vs_distance=frozen(score, np.float32),
    )


def _theta(cfg: Any, lt: str) -> float | None:
    params = getattr(cfg, "rope_parameters", None) or {}
    if lt and isinstance(params.get(lt), dict):
        params = params[lt]
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    theta = theta or getattr(cfg, "rope_theta", None)
    return float(theta) if theta else None


# ----------------------------------------------------------------------- learned
def _learned_module(model: Any) -> tuple[str, Any] | None:
    """(name, module) of a learned position-embedding table outside the decoder layers."""
    import torch

    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in _LEARNED_NAMES and isinstance(module, torch.nn.Embedding):
            return name, module
    return None


def _learned(name: str, module: Any, n: int) -> LearnedTable:
    offset = int(getattr(module, "offset", 0))
    weight = module.weight.detach().float().cpu().numpy()  # (offset + size, hidden)
    table = weight[offset : offset + n]  # (n', hidden): n' ≤ n when the table is shorter
    unit = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)
    return LearnedTable(
        table=frozen(table, np.float32),
        similarity=frozen(unit @ unit.T, np.float32),
        offset=offset,
        table_size=weight.shape[0] - offset,
        module=name,
    )


# ----------------------------------------------------------------------- alibi
def _uses_alibi(cfg: Any) -> bool:
    attn = getattr(cfg, "attn_config", None)
    nested = getattr(attn, "alibi", None) if attn is not None else None
    return bool(getattr(cfg, "alibi", False) or nested or cfg.model_type == "bloom")


def _alibi(model: Any, cfg: Any) -> AlibiSlopes | None:
    """Slopes from the model's own ``build_alibi_tensor`` (None when its module has none)."""
    import torch

    build = getattr(sys.modules.get(type(model).__module__), "build_alibi_tensor", None)
    if build is None:
        return None
    heads = int(cfg.num_attention_heads)
    mask = torch.ones(
        (1, 2), dtype=torch.long
    )  # two positions: the bias at position 1 is the slope
    alibi = build(mask, heads, torch.float32)  # (heads, 1, 2)
    slopes = alibi[:, 0, 1].float().numpy()
    head_dim = cfg.hidden_size // heads
    scale = 1 / math.sqrt(head_dim) if cfg.model_type == "falcon" else 1.0
    return AlibiSlopes(frozen(slopes, np.float32), scale)


# ----------------------------------------------------------------------- session form
_ROPE_ARRAYS = ("inv_freq", "angles", "distances", "score_vs_distance")
_ROPE_FIELDS = ("layer_type", "layers", "rope_type", "theta", "head_dim", "rotary_dim",
                "attention_scaling")  # fmt: skip


def view_arrays(view: PositionView) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, json) of a view, to store in a session file beside a run (``positions_*``)."""
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {"kind": view.kind, "positions": view.positions, "rope": []}
    for i, s in enumerate(view.rope):
        for name in _ROPE_ARRAYS:
            arrays[f"positions_rope{i}_{name}"] = getattr(s, name)
        meta["rope"].append({f: getattr(s, f) for f in _ROPE_FIELDS})
    if view.learned is not None:
        arrays["positions_table"] = view.learned.table
        arrays["positions_similarity"] = view.learned.similarity
        t = view.learned
        meta["learned"] = {"offset": t.offset, "table_size": t.table_size, "module": t.module}
    if view.alibi is not None:
        arrays["positions_slopes"] = view.alibi.slopes
        meta["alibi_scale"] = view.alibi.bias_scale
    return arrays, meta


def view_from_arrays(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> PositionView:
    """The view :func:`view_arrays` stored."""
    rope = []
    for i, m in enumerate(meta.get("rope", [])):
        fields: dict[str, Any] = {**m, "layers": tuple(m["layers"])}
        for n in _ROPE_ARRAYS:
            fields[n] = frozen(arrays[f"positions_rope{i}_{n}"], np.float32)
        rope.append(RopeSet(**fields))
    learned = alibi = None
    if "learned" in meta:
        learned = LearnedTable(
            frozen(arrays["positions_table"], np.float32),
            frozen(arrays["positions_similarity"], np.float32),
            **meta["learned"],
        )
    if "positions_slopes" in arrays:
        alibi = AlibiSlopes(frozen(arrays["positions_slopes"], np.float32), meta["alibi_scale"])
    return PositionView(meta["kind"], int(meta["positions"]), tuple(rope), learned, alibi)
