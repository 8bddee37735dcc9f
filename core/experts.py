"""Mixture of experts: which experts each token went to, with the router's own numbers.

In an MoE layer the MLP is a set of experts and a router (a linear layer, the "gate") scores them
for each token; only the top k run, and their outputs are added with the router's weights. Each
family does this its own way (softmax then top-k, renormalised or not per ``norm_topk_prob``;
Granite's softmax over the top-k logits; DeepSeek's sigmoid with a bias), but in transformers 5
every such router module returns the same triple ``(router_logits, top_k_weights, top_k_index)``
and the model declares the router's class in ``_can_record_outputs["router_logits"]`` (what
``output_router_logits=True`` records). :class:`RouterCapture` hooks exactly those modules, so the
chosen experts and weights are the ones the MoE block consumed, not a re-derivation. Dense
models declare no router: nothing is hooked and the routing is None.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_lens.core.records import StepRecord, frozen

_ROUTERS: weakref.WeakKeyDictionary[Any, tuple[tuple[int, Any], ...]] = (
    weakref.WeakKeyDictionary()
)  # model -> its routers, found once
_BY_CAPTURE: weakref.WeakKeyDictionary[Any, RouterCapture] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class ExpertRouting:
    """One forward pass's routing: per MoE layer and position, the router's distribution over the
    experts and the experts it chose with the weights their outputs were added with.

    Rows are consecutive positions from ``first_position``: the whole (uncached) prompt for a
    prefill, the one new position for a decode step.
    """

    layers: np.ndarray  # (moe_layers,) int64: the decoder layer each router belongs to
    probs: np.ndarray  # (moe_layers, rows, experts) float32: softmax (or sigmoid) of the logits
    experts: np.ndarray  # (moe_layers, rows, k) int64: the chosen experts, in the router's order
    weights: np.ndarray  # (moe_layers, rows, k) float32: the weight each chosen output got
    first_position: int
    scoring: str = "softmax"  # how ``probs`` come from the router logits: softmax or sigmoid

    @property
    def num_experts(self) -> int:
        return int(self.probs.shape[2])

    @property
    def top_k(self) -> int:
        return int(self.experts.shape[2])

    @property
    def rows(self) -> int:
        return int(self.probs.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.probs.nbytes + self.experts.nbytes + self.weights.nbytes)

    @property
    def positions(self) -> np.ndarray:
        """(rows,) int64: the position of each row."""
        return np.arange(self.first_position, self.first_position + self.rows, dtype=np.int64)

    def row(self, index: int) -> ExpertRouting:
        """The routing of one row (negative counts from the end) as a one-row routing."""
        i = range(self.rows)[index]
        return ExpertRouting(
            self.layers,
            frozen(self.probs[:, i : i + 1]),
            frozen(self.experts[:, i : i + 1]),
            frozen(self.weights[:, i : i + 1]),
            self.first_position + i,
            self.scoring,
        )

    def chosen_matrix(self) -> np.ndarray:
        """(moe_layers, rows, experts) float32: each chosen expert's weight, 0 where not chosen."""
        out = np.zeros(self.probs.shape, np.float32)
        layers, rows = np.indices(self.experts.shape[:2])
        for j in range(self.top_k):
            out[layers, rows, self.experts[:, :, j]] = self.weights[:, :, j]
        return out

    def counts(self) -> np.ndarray:
        """(moe_layers, experts) int64: how many rows chose each expert, per layer."""
        out = np.zeros((self.probs.shape[0], self.num_experts), np.int64)
        for layer in range(out.shape[0]):
            out[layer] = np.bincount(self.experts[layer].ravel(), minlength=self.num_experts)
        return out


def _recorder_specs(spec: Any) -> list[Any]:
    return list(spec) if isinstance(spec, list | tuple) else [spec]


def _matches(spec: Any, name: str, module: Any) -> bool:
    """transformers' own matching of an ``_can_record_outputs`` entry (a class, a class name or
    an ``OutputRecorder`` with target class, class name and layer name)."""
    if isinstance(spec, type):
        return isinstance(module, spec)
    if isinstance(spec, str):
        return type(module).__name__ == spec or name.endswith(spec)
    target, suffix = getattr(spec, "target_class", None), getattr(spec, "class_name", None)
    hit = (target is not None and isinstance(module, target)) or (
        suffix is not None and name.endswith(suffix)
    )
    layer = getattr(spec, "layer_name", None)
    return hit and (layer is None or f".{layer.strip('.')}." in f".{name}.")


def _declared(model: Any, key: str) -> list[tuple[str, Any]]:
    """(name, module) of every module the model declares it records under ``key``."""
    recorders = getattr(model, "_can_record_outputs", None) or {}
    spec = recorders.get(key) if isinstance(recorders, dict) else None
    if spec is None:
        return []
    specs = _recorder_specs(spec)
    return [(n, m) for n, m in model.named_modules() if any(_matches(s, n, m) for s in specs)]


def find_routers(model: Any) -> tuple[tuple[int, Any], ...]:
    """(decoder layer, router module) for each MoE layer, in layer order; () for a dense model.

    Found from the model's own declarations (``_can_record_outputs``): the router class under
    ``router_logits``, the decoder layer class under ``hidden_states``.
    """
    try:
        return _ROUTERS[model]
    except (KeyError, TypeError):
        pass
    routers = _declared(model, "router_logits")
    layers = [n for n, _ in _declared(model, "hidden_states")]
    found = []
    for i, (name, module) in enumerate(routers):
        owner = [j for j, layer in enumerate(layers) if name.startswith(layer + ".")]
        digits = re.findall(r"\.(\d+)\.", f".{name}.")
        index = owner[0] if owner else int(digits[-1]) if digits else i
        found.append((index, module))
    result = tuple(sorted(found, key=lambda pair: pair[0]))
    try:
        _ROUTERS[model] = result
    except TypeError:  # not weak-referenceable: find them again next time
        pass
    return result


def is_moe(model: Any) -> bool:
    return bool(find_routers(model))


def _scoring(router: Any) -> str:
    """DeepSeek-V3-style routers score with a sigmoid (and a selection bias); the rest softmax."""
    return "sigmoid" if hasattr(router, "e_score_correction_bias") else "softmax"


class RouterCapture:
    """Context manager: forward hooks on every router, keeping what each returned.

    ``RouterCapture(model, key)`` files what it records under ``key`` (the step's ``Capture``), so
    :func:`routing_of` finds it when the step's record is built. For a dense model it hooks
    nothing and records nothing.
    """

    def __init__(self, model: Any, key: Any = None) -> None:
        self.routers = find_routers(model)
        self.key = key
        self.outputs: dict[int, tuple[Any, Any, Any]] = {}  # layer -> (logits, weights, index)
        self._handles: list[Any] = []

    def __enter__(self) -> RouterCapture:
        for layer, router in self.routers:
            self._handles.append(router.register_forward_hook(self._hook(layer)))
        if self.routers and self.key is not None:
            _BY_CAPTURE[self.key] = self
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, layer: int) -> Any:
        def keep(_module: Any, _inputs: Any, output: Any) -> None:
            if isinstance(output, tuple) and len(output) >= 3:
                # references only: the router made these tensors for this call alone
                self.outputs[layer] = (output[0], output[1], output[2])

        return keep

    def routing(self, last_position: int) -> ExpertRouting | None:
        """What the routers returned, copied to numpy; rows end at ``last_position``."""
        import torch

        layers = [layer for layer, _ in self.routers if layer in self.outputs]
        if not layers:
            return None
        logits = [self.outputs[n][0].reshape(-1, self.outputs[n][0].shape[-1]) for n in layers]
        scoring = _scoring(self.routers[0][1])
        score = torch.sigmoid if scoring == "sigmoid" else lambda x: torch.softmax(x, dim=-1)
        probs = torch.stack([score(x.float()) for x in logits])  # (moe_layers, rows, experts)
        k = self.outputs[layers[0]][2].shape[-1]
        weights = torch.stack([self.outputs[n][1].reshape(-1, k).float() for n in layers])
        index = torch.stack([self.outputs[n][2].reshape(-1, k) for n in layers])
        rows = probs.shape[1]
        return ExpertRouting(
            layers=frozen(layers, np.int64),
            probs=frozen(probs.cpu().numpy(), np.float32),
            experts=frozen(index.cpu().numpy(), np.int64),
            weights=frozen(weights.cpu().numpy(), np.float32),
            first_position=last_position - rows + 1,
            scoring=scoring,
        )


def routing_of(key: Any, last_position: int) -> ExpertRouting | None:
    """The routing a :class:`RouterCapture` filed under ``key`` (None for a dense model)."""
    capture = _BY_CAPTURE.get(key)
    return None if capture is None else capture.routing(last_position)


def routing_at(steps: Sequence[StepRecord], position: int) -> ExpertRouting | None:
    """The one-row routing of the token at ``position``, from the step whose forward read it
    (the prefill for a prompt token, the next decode step for a response token)."""
    for step in steps:
        r = step.routing
        if r is not None and r.first_position <= position < r.first_position + r.rows:
            return r.row(position - r.first_position)
    return None


def context_routing(steps: Sequence[StepRecord]) -> ExpertRouting | None:
    """Every position the steps read, in order, as one routing (None for a dense model)."""
    parts = [s.routing for s in steps if s.routing is not None]
    if not parts:
        return None
    first = parts[0]
    return ExpertRouting(
        first.layers,
        frozen(np.concatenate([r.probs for r in parts], axis=1)),
        frozen(np.concatenate([r.experts for r in parts], axis=1)),
        frozen(np.concatenate([r.weights for r in parts], axis=1)),
        first.first_position,
        first.scoring,
    )
