"""Forbidding an expert equals masking its router logit by hand (tiny Mixtral and OLMoE): the
same tokens and logits, and the routing the steps record never picks it; forcing experts
routes only to them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core.interventions import ExpertEdit, InterventionError
from tests.core.interventions.reference import assert_same, engine_greedy, greedy_reference
from tests.core.test_experts import moe_engine

LAYER = 1


@pytest.fixture(scope="module", params=["mixtral", "olmoe"])
def moe(request: Any, tokenizer: Any) -> Any:
    return moe_engine(tokenizer, request.param)


def _hand_router(router: Any, hide: list[int]) -> Any:
    """The Mixtral / OLMoE router's forward, written out, with ``hide``'s logits masked."""

    def forward(hidden: Any) -> tuple[Any, Any, Any]:
        hidden = hidden.reshape(-1, router.hidden_dim)  # (tokens, hidden)
        logits = torch.nn.functional.linear(hidden, router.weight)  # (tokens, experts)
        logits[:, hide] = torch.finfo(logits.dtype).min
        probs = torch.softmax(logits.float(), dim=-1)
        top, index = torch.topk(probs, router.top_k, dim=-1)  # (tokens, k)
        if getattr(router, "norm_topk_prob", True):
            top = top / top.sum(dim=-1, keepdim=True)
        return logits, top.to(logits.dtype), index

    return forward


def _router(engine: Any) -> Any:
    return engine.model.model.layers[LAYER].mlp.gate


def _chosen(run: Any) -> np.ndarray:
    """Every expert the run's steps routed to at LAYER."""
    rows = [s.routing.experts[list(s.routing.layers).index(LAYER)] for s in run.steps]
    return np.concatenate([r.ravel() for r in rows])


def test_forbidding_an_expert_equals_masking_its_router_logit(moe: Any) -> None:
    plain = engine_greedy(moe, [])
    used = np.bincount(_chosen(plain[2])).argmax()  # the expert the plain run uses most
    router = _router(moe)
    router.forward = _hand_router(router, [int(used)])
    try:
        ref = greedy_reference(moe.model, _ids(moe))
    finally:
        del router.forward
    ours = engine_greedy(moe, [ExpertEdit(LAYER, (int(used),), "off")])
    assert_same(ours, ref)
    assert int(used) not in set(_chosen(ours[2]).tolist())
    assert not np.allclose(ours[1], plain[1], atol=1e-4)


def test_forcing_experts_routes_only_to_them(moe: Any) -> None:
    router = _router(moe)
    others = [e for e in range(router.weight.shape[0]) if e not in (0, 3)]
    router.forward = _hand_router(router, others)
    try:
        ref = greedy_reference(moe.model, _ids(moe))
    finally:
        del router.forward
    ours = engine_greedy(moe, [ExpertEdit(LAYER, (0, 3), "force")])
    assert_same(ours, ref)
    assert set(_chosen(ours[2]).tolist()) == {0, 3}


def test_a_missing_expert_or_a_dense_layer_is_refused(moe: Any, tiny_engine: Any) -> None:
    prompt = moe.tokenize("hello", chat=False)
    with pytest.raises(InterventionError, match="no expert 9"):
        moe.start(prompt, None, interventions=[ExpertEdit(LAYER, (9,))])  # type: ignore[arg-type]
    with pytest.raises(InterventionError, match="has no experts"):
        tiny_engine.start(prompt, None, interventions=[ExpertEdit(0, (0,))])  # type: ignore[arg-type]


def _ids(engine: Any) -> list[int]:
    from tests.core.interventions.reference import PROMPT

    return list(engine.tokenize(PROMPT, chat=False).ids)
