"""Mixture-of-experts routing: the experts and weights recorded are the ones the MoE block used.

Tiny random MoE models of several families (Mixtral renormalises its top-k; Qwen2-MoE and OLMoE
keep the raw probabilities, ``norm_topk_prob`` False; Granite-MoE softmaxes the top-k logits)
are run with :class:`RouterCapture`; each recording is checked against the model's own
``output_router_logits``, an independent ``torch.topk``, and the block's experts re-run with the
recorded choices, in a prefill and in cached decode steps through the engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core.experts import ExpertRouting, RouterCapture, find_routers, routing_of

EXPERTS, TOP_K, LAYERS, VOCAB = 4, 2, 3, 128
FAMILIES: dict[str, dict[str, Any]] = {
    "mixtral": dict(num_local_experts=EXPERTS),
    "qwen2_moe": dict(
        num_experts=EXPERTS,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        mlp_only_layers=[1],
    ),  # fmt: skip
    "olmoe": dict(num_experts=EXPERTS, norm_topk_prob=True),
    "granitemoe": dict(num_local_experts=EXPERTS),
}


def moe_config(model_type: str, vocab: int = VOCAB, **overrides: Any) -> Any:
    from transformers import CONFIG_MAPPING

    cfg = dict(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        num_experts_per_tok=TOP_K, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        **FAMILIES[model_type],
    )  # fmt: skip
    cfg.update(overrides)
    return CONFIG_MAPPING[model_type](**cfg)


def moe_model(model_type: str, vocab: int = VOCAB, **overrides: Any) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = moe_config(model_type, vocab, **overrides)
    return AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request: Any) -> tuple[str, Any]:
    return request.param, moe_model(request.param)


def _expected_top(model_type: str, model: Any, logits: torch.Tensor) -> tuple[Any, Any]:
    """Each family's selection written out from its config (an independent ``torch.topk``)."""
    if model_type == "granitemoe":  # softmax over the top-k logits
        top, index = logits.float().topk(TOP_K, dim=-1)
        return index, torch.softmax(top, dim=-1)
    probs = torch.softmax(logits.float(), dim=-1)
    top, index = torch.topk(probs, TOP_K, dim=-1)
    if getattr(model.config, "norm_topk_prob", model_type == "mixtral"):
        top = top / top.sum(dim=-1, keepdim=True)
    return index, top


def test_routers_found_per_layer(family: tuple[str, Any]) -> None:
    model_type, model = family
    layers = [layer for layer, _ in find_routers(model)]
    assert layers == ([0, 2] if model_type == "qwen2_moe" else list(range(LAYERS)))


def test_prefill_routing_equals_the_models_own(family: tuple[str, Any]) -> None:
    model_type, model = family
    ids = torch.arange(3, 12)[None]  # (1, 9)
    key = type("Key", (), {})()  # anything weak-referenceable
    with torch.inference_mode(), RouterCapture(model, key):
        out = model(ids, output_router_logits=True)
    routing = routing_of(key, ids.shape[1] - 1)
    assert isinstance(routing, ExpertRouting)
    own = out.router_logits  # one (rows, experts) tensor per MoE layer
    assert routing.probs.shape == (len(own), 9, EXPERTS) and routing.first_position == 0
    assert routing.experts.shape == routing.weights.shape == (len(own), 9, TOP_K)
    assert not routing.probs.flags.writeable and not routing.experts.flags.writeable
    for i, logits in enumerate(own):
        want = torch.softmax(logits.float(), dim=-1).numpy()
        np.testing.assert_allclose(routing.probs[i], want, rtol=0, atol=1e-7)
        index, weights = _expected_top(model_type, model, logits)
        np.testing.assert_array_equal(routing.experts[i], index.numpy())
        np.testing.assert_allclose(routing.weights[i], weights.numpy(), rtol=1e-6, atol=1e-7)
    if model_type in ("qwen2_moe", "olmoe"):  # raw probabilities unless norm_topk_prob
        picked = np.take_along_axis(routing.probs, routing.experts, axis=-1)
        summed = not model.config.norm_topk_prob
        np.testing.assert_allclose(
            routing.weights, picked if summed else picked / picked.sum(-1, keepdims=True), 1e-6
        )


def test_recorded_choices_reproduce_the_blocks_output() -> None:
    """Mixtral's experts re-run with the recorded experts and weights give the block's output."""
    model = moe_model("mixtral")
    blocks = [layer.mlp for layer in model.model.layers]
    seen: list[tuple[Any, Any]] = []
    handles = [
        b.register_forward_hook(lambda _m, i, o: seen.append((i[0], o))) for b in blocks
    ]  # test-only hooks: the block's input and output
    key = type("Key", (), {})()
    try:
        with torch.inference_mode(), RouterCapture(model, key):
            model(torch.arange(5, 13)[None])
    finally:
        for h in handles:
            h.remove()
    routing = routing_of(key, 7)
    assert routing is not None
    with torch.inference_mode():
        for layer, (x, y) in enumerate(seen):
            x2 = x.reshape(-1, x.shape[-1])  # (rows, hidden)
            index = torch.from_numpy(np.array(routing.experts[layer]))
            weights = torch.from_numpy(np.array(routing.weights[layer]))
            again = blocks[layer].experts(x2, index, weights)
            torch.testing.assert_close(again, y.reshape(x2.shape), rtol=0, atol=0)


def test_dense_model_hooks_nothing() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2)
    )  # fmt: skip
    assert find_routers(model) == ()
    key = type("Key", (), {})()
    with RouterCapture(model, key) as cap:
        assert cap._handles == []
        with torch.inference_mode():
            model(torch.arange(3, 8)[None])
    assert routing_of(key, 4) is None


def test_routing_helpers() -> None:
    probs = np.array([[[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]]], np.float32)  # (1 layer, 2 rows, 3)
    experts = np.array([[[1, 2], [0, 2]]])
    weights = np.array([[[0.6, 0.3], [0.5, 0.3]]], np.float32)
    r = ExpertRouting(np.array([4]), probs, experts, weights, first_position=10)
    assert r.num_experts == 3 and r.top_k == 2 and r.rows == 2
    assert r.nbytes == probs.nbytes + experts.nbytes + weights.nbytes
    np.testing.assert_array_equal(r.positions, [10, 11])
    np.testing.assert_array_equal(r.counts(), [[1, 1, 2]])
    np.testing.assert_allclose(r.chosen_matrix(), [[[0, 0.6, 0.3], [0.5, 0, 0.3]]])
    last = r.row(-1)
    assert last.first_position == 11 and last.probs.shape == (1, 1, 3)
    np.testing.assert_array_equal(last.experts, [[[0, 2]]])


# ---- through the engine: prefill and cached decode steps ------------------------------------


def moe_engine(tokenizer: Any, model_type: str = "mixtral") -> Any:
    from llm_lens.core.loading import LoadedModel, describe
    from llm_lens.core.loop.engine import Engine

    model = moe_model(model_type, vocab=len(tokenizer))
    return Engine(LoadedModel(model, tokenizer, describe(model, f"tiny-{model_type}", "t", "t")))


@pytest.mark.parametrize("model_type", ["mixtral", "qwen2_moe"])
def test_engine_steps_carry_the_routing(tokenizer: Any, model_type: str) -> None:
    """Each step's routing equals an uncached forward's router output at the same positions."""
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY

    engine = moe_engine(tokenizer, model_type)
    prompt = engine.tokenize("The quick brown fox jumps", chat=False)
    steps = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=3)).run_all()
    last = steps[-1]
    ids = torch.tensor(last.context_ids[: last.position + 1])[None]
    with torch.inference_mode():
        own = engine.model(ids, output_router_logits=True).router_logits
    full = torch.stack([torch.softmax(x.float(), -1) for x in own]).numpy()  # (L, T, E)
    for step in steps:
        r = step.routing
        assert r is not None
        rows = len(prompt) if step.is_prefill else 1
        assert r.rows == rows and r.positions[-1] == step.position
        want = full[:, r.first_position : step.position + 1]
        np.testing.assert_allclose(r.probs, want, rtol=0, atol=2e-5)
        np.testing.assert_array_equal(r.experts, np.argsort(-want, axis=-1)[..., :TOP_K])


def test_dense_engine_records_no_routing(tokenizer: Any) -> None:
    from llm_lens.core.loop.engine import Engine, RunConfig
    from llm_lens.core.sampling import GREEDY
    from tests.conftest import make_tiny

    tiny_engine = Engine(make_tiny(tokenizer))

    prompt = tiny_engine.tokenize("Hello", chat=False)
    steps = tiny_engine.start(prompt, GREEDY, RunConfig(max_new_tokens=2)).run_all()
    assert [s.routing for s in steps] == [None, None]


def test_routing_at_and_context_routing(tokenizer: Any) -> None:
    from llm_lens.core.experts import context_routing, routing_at
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY

    engine = moe_engine(tokenizer)
    prompt = engine.tokenize("Red green blue", chat=False)
    steps = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=3)).run_all()
    n = len(prompt)
    whole = context_routing(steps)
    assert whole is not None and whole.rows == n + 2  # the last chosen token is never read
    np.testing.assert_array_equal(whole.positions, np.arange(n + 2))
    for p in range(n + 2):
        one = routing_at(steps, p)
        assert one is not None and one.first_position == p
        np.testing.assert_array_equal(one.experts[:, 0], whole.experts[:, p])
    assert routing_at(steps, n + 2) is None
    # the response token chosen at step 0 is read (and routed) by step 1
    np.testing.assert_array_equal(routing_at(steps, n).probs, steps[1].routing.probs)
