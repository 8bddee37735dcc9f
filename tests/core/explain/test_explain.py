"""Why this token: direct logit attribution, gradient × input and the information-flow graph,
checked against the model's own numbers (its logits, its attention output, finite differences).
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from llm_lens.core.explain.attribution import explain, explanation_dict, logit_attribution
from llm_lens.core.explain.flow import FlowGraph, _per_head_out, flow_graph, importance
from llm_lens.core.explain.trace import trace_context
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.families import WINDOW, family_model


@pytest.fixture(scope="module")
def tiny_run(tiny_engine):
    prompt = tiny_engine.tokenize("The cat sat on the mat because", chat=False)
    run = tiny_engine.start(prompt, GREEDY, RunConfig(max_new_tokens=4))
    run.run_all()
    return run


def _check_split(x, step, vs=None):
    lg = x.logits
    logits = step.logits.astype(np.float64)
    want = logits[step.token.id] - (logits[vs] if vs is not None else 0.0)
    scale = max(abs(want), float(np.abs(lg.heads).sum() + np.abs(lg.mlp).sum() + abs(lg.embed)))
    # the pass over the context reproduces the run's own (cached) logit
    assert lg.logit == pytest.approx(want, rel=1e-4, abs=1e-4 * scale)
    # no biases in a Llama: the pieces sum to the whole logit
    assert abs(lg.logit - lg.sum) <= 1e-4 * scale
    assert abs(lg.residual) <= 1e-4 * scale
    # the heads of each block sum to the block (no output-projection bias)
    np.testing.assert_allclose(lg.heads.sum(1), lg.attn, rtol=1e-4, atol=1e-4 * scale)


def test_logit_attribution_sums_to_the_logit_on_the_tiny_model(tiny_engine, tiny_run):
    for step in tiny_run.steps[:3]:
        x = explain(tiny_engine, step)
        _check_split(x, step)
        assert x.logits.heads.shape == (2, 4) and x.logits.mlp.shape == (2,)
        assert x.logits.norm_scale > 0


def test_it_runs_inside_inference_mode_as_the_worker_does(tiny_engine, tiny_run):
    step = tiny_run.steps[1]
    plain = explain(tiny_engine, step)
    with torch.inference_mode():
        inside = explain(tiny_engine, step)
    np.testing.assert_allclose(inside.inputs.values, plain.inputs.values, rtol=1e-5)
    assert inside.logits.logit == plain.logits.logit


def test_logit_difference_against_another_token(tiny_engine, tiny_run):
    step = tiny_run.steps[1]
    vs = int(step.top_ids[1])
    x = explain(tiny_engine, step, vs=vs)
    _check_split(x, step, vs)
    plain = explain(tiny_engine, step).logits
    other = logit_attribution(tiny_engine, trace_context(tiny_engine, step.context_ids, vs))
    # the difference's pieces are the two tokens' pieces subtracted
    np.testing.assert_allclose(x.logits.heads, plain.heads - other.heads, atol=1e-4)


def test_a_broken_norm_scale_breaks_the_sum(tiny_engine, tiny_run, monkeypatch):
    """The check can fail: leave the final norm's scale out of the frozen map and it does."""
    import llm_lens.core.explain.attribution as attribution

    real = attribution.frozen_norm_direction
    monkeypatch.setattr(attribution, "frozen_norm_direction", lambda n, h, d: (d, 1.0))
    step = tiny_run.steps[0]
    x = explain(tiny_engine, step)
    assert abs(x.logits.residual) > 1e-3 * abs(x.logits.logit)
    monkeypatch.setattr(attribution, "frozen_norm_direction", real)


def test_the_norm_weight_is_the_models_own(tiny):
    """A final norm with a non-trivial weight: the split still sums to the run's logit."""
    model = copy.deepcopy(tiny.model)
    torch.manual_seed(1)
    with torch.no_grad():
        model.model.norm.weight.uniform_(0.2, 3.0)
    engine = Engine(type(tiny)(model, tiny.tokenizer, tiny.info))
    run = engine.start(engine.tokenize("Once upon a time", chat=False), GREEDY, RunConfig(3))
    run.run_all()
    step = run.steps[-1]
    _check_split(explain(engine, step), step)


def test_gradient_times_input_matches_finite_differences(tiny, tiny_run):
    """d log p / d s at s = 1 for embedding j scaled by s is exactly grad_j · e_j."""
    model = copy.deepcopy(tiny.model).double()
    engine = Engine(type(tiny)(model, tiny.tokenizer, tiny.info))
    step = tiny_run.steps[2]
    ids = torch.tensor(step.context_ids)[None]
    x = explain(engine, step)
    base = model.get_input_embeddings()(ids).detach()
    eps = 1e-2  # the norms compute in float32 even in a float64 model: a step well above that

    def logp(j, s):
        e = base.clone()
        e[0, j] *= s
        with torch.no_grad():
            out = model(inputs_embeds=e).logits[0, -1]
        return float(torch.log_softmax(out, -1)[step.token.id])

    fd = [(logp(j, 1 + eps) - logp(j, 1 - eps)) / (2 * eps) for j in range(ids.shape[1])]
    np.testing.assert_allclose(x.inputs.values, fd, rtol=1e-2, atol=5e-5)
    assert x.inputs.texts[-1] == tiny_engine_text(engine, step.context_ids[-1])
    assert "gradient × input" in x.inputs.method


def tiny_engine_text(engine, token_id):
    return engine.texts.text(int(token_id))


def test_per_source_parts_rebuild_the_attention_output(tiny_engine, tiny_run):
    """Σ_j Σ_h A_h[i, j] W_O[:, h] v_h[j] is the attention block's own output at every i, and
    the weights recomputed one layer at a time are the model's own (output_attentions)."""
    step = tiny_run.steps[3]
    trace = trace_context(tiny_engine, step.context_ids, step.token.id, weight_budget=0)
    kept = trace_context(tiny_engine, step.context_ids, step.token.id)
    assert trace.kept_weights is None and kept.kept_weights is not None
    model = tiny_engine.model
    model.set_attn_implementation("eager")
    with torch.no_grad():
        own = model(torch.tensor(step.context_ids)[None], output_attentions=True).attentions
    for layer in range(2):
        weights = trace.weights(layer)  # (H, T, T)
        torch.testing.assert_close(weights, own[layer][0].float(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(kept.weights(layer), weights, rtol=1e-5, atol=1e-6)
        u = _per_head_out(tiny_engine, trace, layer)  # (H, T, hidden)
        rebuilt = torch.einsum("hit,htd->id", weights, u)
        torch.testing.assert_close(rebuilt, trace.attn[layer], rtol=1e-4, atol=1e-5)
    # the pass itself ran the fused attention: no T × T matrix was kept
    t = len(step.context_ids)
    kept = [v for v in vars(trace).values() if isinstance(v, torch.Tensor) and v.dim() >= 2]
    assert kept and not any(v.shape[-2:] == (t, t) for v in kept)


def test_the_graph_in_small_blocks_equals_the_graph_in_one(tiny_engine, tiny_run, monkeypatch):
    """The memory bounds (weights recomputed a layer at a time after a fused-attention pass,
    layers run again in the backward pass, rows of parts taken a few at a time) change no
    number."""
    from llm_lens.core.explain.flow import flow_graph, row_chunk

    step = tiny_run.steps[3]
    trace = trace_context(tiny_engine, step.context_ids, step.token.id)
    bounded = trace_context(tiny_engine, step.context_ids, step.token.id, weight_budget=0)
    # each layer run again in the backward pass, without the cache (values recomputed)
    import llm_lens.core.explain.hooks as trace_module

    wrapped = []
    real = trace_module.checkpoint
    monkeypatch.setattr(trace_module, "checkpoint", lambda *a, **k: (wrapped.append(1),
                                                                     real(*a, **k))[1])  # fmt: skip
    again = trace_context(tiny_engine, step.context_ids, step.token.id, 0, checkpoint_tokens=1)
    assert len(wrapped) == 2  # both layers, once each in the forward
    assert all("forward" not in vars(layer) for layer in tiny_engine.anatomy.layers)
    assert again.values is None and again.kept_weights is None
    torch.testing.assert_close(again.grad_x_input, trace.grad_x_input, rtol=1e-4, atol=1e-6)
    for name in ("pre", "attn", "heads_in"):
        torch.testing.assert_close(getattr(again, name), getattr(trace, name), rtol=1e-4,
                                   atol=1e-5)  # fmt: skip
    for layer in range(2):
        torch.testing.assert_close(again.layer_values(layer), trace.values[layer])
    lg = logit_attribution(tiny_engine, again)
    np.testing.assert_allclose(lg.heads, logit_attribution(tiny_engine, trace).heads, atol=1e-5)
    tokens, hidden = trace.pre.shape[1:]
    assert row_chunk(tokens, hidden, budget=10**9) >= tokens
    assert row_chunk(tokens, hidden, budget=2 * tokens * hidden) == 2
    whole = flow_graph(tiny_engine, trace, 0.0, budget=10**9)
    assert len(whole.weight) > 20
    cases = [(trace, 2 * tokens * hidden), (trace, 1), (bounded, 1), (bounded, 10**9), (again, 1)]
    for t, budget in cases:
        part = flow_graph(tiny_engine, t, 0.0, budget=budget)
        for name in ("kind", "src_level", "src_pos", "dst_level", "dst_pos"):
            np.testing.assert_array_equal(getattr(part, name), getattr(whole, name))
        # the fused pass rounds differently from the eager one in the last float32 bits
        np.testing.assert_allclose(part.weight, whole.weight, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(part.head_shares, whole.head_shares, rtol=1e-4, atol=1e-6)


def test_importance_is_the_papers_proximity():
    y = torch.tensor([3.0, 1.0])
    parts = torch.tensor([[[2.0, 0.0], [1.0, 1.0], [-1.0, 0.0]]])
    got = importance(parts, y[None])[0]
    prox = torch.tensor([max(0.0, 4 - 2), max(0.0, 4 - 2), max(0.0, 4 - 5)])
    torch.testing.assert_close(got, prox / prox.sum())


def test_flow_graph_routes_and_pruning(tiny_engine, tiny_run):
    step = tiny_run.steps[3]
    x = explain(tiny_engine, step, floor=0.0)
    g: FlowGraph = x.graph
    top = (g.top_level, len(g.tokens) - 1)
    assert len(g.tokens) == len(step.context_ids)
    # at floor 0 every part of every reached sum is an edge: each node's parts sum to 1
    for level in range(1, g.top_level + 1):
        for pos in set(g.dst_pos[g.dst_level == level].tolist()):
            into = (g.dst_level == level) & (g.dst_pos == pos)
            assert g.weight[into].sum() == pytest.approx(1.0, abs=1e-5)
    assert ((g.weight >= 0) & (g.weight <= 1)).all()
    attn = g.kind == 0
    np.testing.assert_allclose(g.head_shares[attn].sum(1), 1.0, atol=1e-5)
    assert (g.src_level < g.dst_level).all()
    # a higher threshold keeps a subset, and every kept edge leads up to the output
    low, high = g.kept(0.02), g.kept(0.2)
    assert high.sum() < low.sum() and not (high & ~low).any()
    d = g.as_dict(0.2)
    ids = {n["id"]: (2 * n["layer"] + (n["stage"] == "mid"), n["position"]) for n in d["nodes"]}
    assert top in ids.values()
    for e in d["edges"]:
        assert e["weight"] >= 0.2 and ids[e["source"]][0] < ids[e["target"]][0]


def test_explanation_dict_is_json(tiny_engine, tiny_run):
    x = explain(tiny_engine, tiny_run.steps[1])
    data = json.loads(json.dumps(explanation_dict(x)))
    kinds = {c["kind"] for c in data["components"]}
    assert kinds == {"embed", "attn", "head", "mlp"}
    heads = [c for c in data["components"] if c["kind"] == "head"]
    assert len(heads) == 2 * 4
    assert data["sum"] == pytest.approx(data["logit"] - data["residual"])
    assert [t["index"] for t in data["input_attribution"]] == list(range(len(x.inputs.texts)))
    assert data["graph"]["nodes"] and "edges" in data["graph"]


@pytest.mark.slow
def test_logit_attribution_on_the_bundled_model(engine, greedy_run):
    for step in (greedy_run.steps[0], greedy_run.steps[5]):
        x = explain(engine, step)
        _check_split(x, step)
        assert x.logits.heads.shape == (30, 9)
        assert len(x.inputs.values) == step.position + 1
        assert x.graph.kept(0.04).any()


def test_what_does_not_split_is_the_biases_on_a_tiny_gpt2(loaded):
    """GPT-2: LayerNorm (centring), Conv1D projections with biases, learned positions. The
    residual is exactly the output-projection biases plus the final LayerNorm's bias."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from llm_lens.core.loading import LoadedModel, describe

    cfg = GPT2Config(vocab_size=len(loaded.tokenizer), n_embd=64, n_layer=2, n_head=4,
                     n_positions=128, attn_implementation="eager")  # fmt: skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)  # non-trivial norm weights and biases
    engine = Engine(LoadedModel(model, loaded.tokenizer, describe(model, "gpt2", "t", "g")))
    run = engine.start(engine.tokenize("The cat sat on", chat=False), GREEDY, RunConfig(3))
    step = run.run_all()[-1]
    lg = explain(engine, step).logits
    assert lg.logit == pytest.approx(float(step.logits[step.token.id]), rel=1e-5)
    ln_bias = float((model.lm_head.weight[step.token.id] @ model.transformer.ln_f.bias).detach())
    head_biases = float((lg.attn - lg.heads.sum(1)).sum())
    assert abs(head_biases) > 0.01 and abs(ln_bias) > 0.01
    assert lg.residual == pytest.approx(head_biases + ln_bias, rel=1e-4, abs=1e-5)


def _tiny_family(loaded, name, extra):
    """A 2-layer random model of the transformers config class ``name`` (with ``extra``), its
    1-D weights (norms) drawn away from 1, run greedily for 3 tokens: (engine, last step)."""
    import transformers

    from llm_lens.core.loading import LoadedModel, describe

    cfg = getattr(transformers, name)(
        vocab_size=len(loaded.tokenizer), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, **extra,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    with torch.no_grad():
        for p in model.eval().parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)  # norms that are not all ones
    engine = Engine(LoadedModel(model, loaded.tokenizer, describe(model, name, "t", name)))
    run = engine.start(engine.tokenize("The cat sat on", chat=False), GREEDY, RunConfig(3))
    return engine, run.run_all()[-1]


def gemma2_step(loaded):
    """A tiny random Gemma 2 (post-attention norms, a final soft-cap) run greedily for 2 tokens:
    (engine, last step); the CLI and the "Why this token?" pane tests read its explanation."""
    import transformers

    from llm_lens.core.loading import LoadedModel, describe

    cfg = transformers.Gemma2Config(
        vocab_size=len(loaded.tokenizer), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        final_logit_softcapping=2.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Gemma2ForCausalLM(cfg).eval()
    engine = Engine(LoadedModel(model, loaded.tokenizer, describe(model, "g", "t", "g")))
    run = engine.start(engine.tokenize("The cat sat", chat=False), GREEDY, RunConfig(2))
    return engine, run.run_all()[-1]


FAMILIES = {
    "qwen2": ("Qwen2Config", {}),  # q/k/v biases, no output-projection bias
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "phi3": ("Phi3Config", {"pad_token_id": 0}),  # fused qkv projection
    "gemma": ("GemmaConfig", {"head_dim": 16}),  # RMSNorm scaled by (1 + w), scaled embeddings
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_split_is_exact_on_other_pre_norm_families(loaded, family):
    engine, step = _tiny_family(loaded, *FAMILIES[family])
    _check_split(explain(engine, step), step)


POST_NORM = {
    # OLMo 2: norms after attention and MLP inside the residual branch, q/k norms
    "olmo2": ("Olmo2Config", {}),
    # Gemma 2: pre- and post-norms (1 + w), scaled embeddings, attention and final soft-caps
    "gemma2": ("Gemma2Config", {"head_dim": 16, "final_logit_softcapping": 2.0,
                                "attn_logit_softcapping": 5.0, "sliding_window": 64}),
    # Gemma 3 (text): the same, local and global rotary sets, q/k norms
    "gemma3_text": ("Gemma3TextConfig", {"head_dim": 16, "final_logit_softcapping": 2.0,
                                         "sliding_window": 64}),
}  # fmt: skip


@pytest.mark.parametrize("family", sorted(POST_NORM))
def test_the_split_is_exact_on_post_norm_families(loaded, family):
    """Post-attention norms held at this step's scale: the heads sum to what each block added,
    and embedding + heads + MLPs is the logit minus the soft-cap's change, within 1e-4."""
    engine, step = _tiny_family(loaded, *POST_NORM[family])
    x = explain(engine, step)
    lg = x.logits
    assert lg.post_norm
    want = float(step.logits[step.token.id])
    assert lg.logit == pytest.approx(want, rel=1e-5, abs=1e-6)
    scale = max(abs(lg.logit - lg.after_unembed), float(np.abs(lg.heads).sum() + abs(lg.embed)))
    # nothing but the final soft-cap is left out (these families have no biases)
    assert abs(lg.sum - (lg.logit - lg.after_unembed)) <= 1e-4 * scale
    assert abs(lg.residual - lg.after_unembed) <= 1e-4 * scale
    np.testing.assert_allclose(lg.heads.sum(1), lg.attn, rtol=1e-4, atol=1e-4 * scale)
    cap = getattr(engine.model.config.get_text_config(), "final_logit_softcapping", None)
    if cap:  # the unembedded logit u is mapped to cap·tanh(u / cap): the model's own value
        u = lg.sum + lg.residual - lg.after_unembed
        assert lg.logit == pytest.approx(cap * np.tanh(u / cap), rel=1e-5)
        assert abs(lg.after_unembed) > 1e-3
    else:
        assert lg.after_unembed == pytest.approx(0.0, abs=1e-5)
    # a post-norm held at the wrong scale breaks the heads' sum
    trace = trace_context(engine, step.context_ids, step.token.id)
    trace.raw_attn = trace.raw_attn * 2.0 + 0.1
    broken = logit_attribution(engine, trace)
    assert np.abs(broken.heads.sum(1) - broken.attn).max() > 1e-3 * scale
    # the flow graph's parts still rebuild each node (through the post-norms)
    g = x.graph
    assert g.kept(0.04).any() and ((g.weight >= 0) & (g.weight <= 1)).all()


def test_a_layer_that_does_not_add_its_blocks_as_they_are_is_one_clear_refusal(tiny_engine):
    """A layer whose output is not its input plus its attention and MLP outputs (here rescaled
    by a hook): the split would not be exact, and it says so in one line."""
    run = tiny_engine.start(tiny_engine.tokenize("The cat sat on", chat=False), GREEDY,
                            RunConfig(2))  # fmt: skip
    step = run.run_all()[-1]
    handle = tiny_engine.anatomy.layers[1].register_forward_hook(
        lambda _m, _i, out: (out[0] * 1.5, *out[1:]) if isinstance(out, tuple) else out * 1.5
    )
    try:
        x = explain(tiny_engine, step)
    finally:
        handle.remove()
    assert "layer 1 does not add its attention and MLP" in x.logits.unsplit
    assert "\n" not in x.logits.unsplit and not x.logits.heads.any() and not x.graph.weight.size
    full = explain(tiny_engine, step)  # without the hook it splits
    assert not full.logits.unsplit and full.logits.heads.any()
    # gradient × input still shown, from the model's own pass (the hooked one: it differs)
    assert x.inputs.values.shape == full.inputs.values.shape
    assert not np.allclose(x.inputs.values, full.inputs.values)


def test_granite_scales_each_branch_and_the_logits_and_the_split_carries_both(loaded):
    """Granite: ``h + residual_multiplier × block(h)`` and logits / ``logits_scaling``. Each
    piece carries the layer's own multiplier and the scaling: the split is exact, and the
    graph's parts rebuild what each block added."""
    engine, run = _family_run(loaded, "granite")
    cfg = engine.model.config
    assert cfg.residual_multiplier != 1.0 and cfg.logits_scaling != 1.0
    step = run.steps[-1]
    _check_split(explain(engine, step), step)
    trace = trace_context(engine, step.context_ids, step.token.id)
    assert trace.branch == (cfg.residual_multiplier,) * engine.info.num_layers
    rows = torch.arange(len(step.context_ids))
    with torch.no_grad():
        for layer in range(engine.info.num_layers):
            u = _per_head_out(engine, trace, layer)
            parts = torch.einsum("hit,htd->itd", trace.weights(layer), u)  # (T, T, hidden)
            added = parts.sum(1) * trace.post_diag(layer, rows)
            torch.testing.assert_close(added, trace.attn[layer], rtol=1e-4, atol=1e-6)


def test_the_analysis_dispatch_explains_a_runs_step(tiny_engine, tiny_run):
    from llm_lens.core.loop.analyses import compute

    x = compute("explain", tiny_engine, tiny_run, {"step": 2, "vs": None})
    assert x.step == 2 and x.logits.token_id == tiny_run.steps[2].token.id
    assert not x.logits.heads.flags.writeable and not x.graph.weight.flags.writeable


# windowed (sliding-window layers shorter than the prompt) and parallel-residual families of
# the architectures matrix (tests/families.py)
PARALLEL = ("falcon_new", "falcon_mq")  # h + attn(ln(h)) + mlp(ln(h)), with MHA-in-groups / MQA
_family_runs: dict[str, tuple[Engine, object]] = {}


def _family_run(loaded, name):
    if name not in _family_runs:
        engine = Engine(family_model(name, loaded.tokenizer))
        prompt = engine.tokenize("The quick brown fox jumps over the lazy dog", chat=False)
        run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=3))
        run.run_all()
        assert len(run.steps[0].context_ids) > WINDOW + 2  # every window bites
        _family_runs[name] = engine, run
    return _family_runs[name]


def _sliding(engine) -> list[bool]:
    """Per layer, whether it attends within the window (Mistral: every layer)."""
    n = engine.info.num_layers
    kinds = getattr(engine.model.config, "layer_types", None) or ["sliding_attention"] * n
    return [k == "sliding_attention" for k in kinds[:n]]


@pytest.mark.parametrize("name", ["gemma2", "gemma3", "mistral", *PARALLEL, "granite"])
def test_the_split_is_exact_on_windowed_parallel_and_scaled_families(loaded, name):
    """Embedding + heads + MLPs is the run's own logit minus what follows the unembedding
    (Gemma 2's soft-cap), within 1e-4, with a prompt longer than the windows."""
    engine, run = _family_run(loaded, name)
    for step in (run.steps[0], run.steps[-1]):
        lg = explain(engine, step).logits
        assert lg.logit == pytest.approx(float(step.logits[step.token.id]), rel=1e-4, abs=1e-5)
        parts = float(np.abs(lg.heads).sum() + np.abs(lg.mlp).sum() + abs(lg.embed))
        scale = max(abs(lg.logit - lg.after_unembed), parts)
        assert abs(lg.sum - (lg.logit - lg.after_unembed)) <= 1e-4 * scale
        assert abs(lg.residual - lg.after_unembed) <= 1e-4 * scale
        np.testing.assert_allclose(lg.heads.sum(1), lg.attn, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize("name", PARALLEL)
def test_a_parallel_block_adds_its_attention_and_mlp_as_they_are(loaded, name):
    """Falcon adds the attention output into the MLP's output tensor in place: the MLP row the
    pass keeps is the MLP's own (the model's MLP called again on its own norm of the input)."""
    engine, run = _family_run(loaded, name)
    step = run.steps[-1]
    trace = trace_context(engine, step.context_ids, step.token.id)
    with torch.no_grad():
        for layer, block in enumerate(engine.anatomy.layers):
            norm = getattr(block, "ln_mlp", None) or block.input_layernorm
            own = block.mlp(norm(trace.pre[layer, -1:]))[0]
            torch.testing.assert_close(trace.mlp_last[layer], own, rtol=1e-5, atol=1e-6)
            step_l = trace.pre[layer + 1, -1] - trace.pre[layer, -1]
            torch.testing.assert_close(step_l, own + trace.attn[layer, -1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["kept", "recomputed", "checkpointed"])
@pytest.mark.parametrize("name", ["gemma2", "gemma3", "mistral"])
def test_windowed_heads_read_only_the_keys_their_window_shows_them(loaded, name, mode):
    """Each source token's part Σ_h A_h[i, j] W_O[:, h] v_h[j] uses the values of every
    position the block attended over (not the window − 1 a sliding layer's cache keeps): the
    parts rebuild the block's own output, and those from outside the window are exactly zero,
    in the graph too. The same whether the weights were kept, recomputed a layer at a time, or
    the layers ran again in the backward pass."""
    engine, run = _family_run(loaded, name)
    step = run.steps[-1]
    kw = {"kept": {}, "recomputed": {"weight_budget": 0},
          "checkpointed": {"weight_budget": 0, "checkpoint_tokens": 1}}[mode]  # fmt: skip
    trace = trace_context(engine, step.context_ids, step.token.id, **kw)
    assert (trace.kept_weights is not None) == (mode == "kept")
    t = len(step.context_ids)
    sliding = _sliding(engine)
    assert any(sliding)
    raw = trace.raw_attn if trace.raw_attn is not None else trace.attn
    i, j = torch.meshgrid(torch.arange(t), torch.arange(t), indexing="ij")
    with torch.no_grad(), trace.eager():
        for layer in range(engine.info.num_layers):
            u = _per_head_out(engine, trace, layer)  # (H, T, hidden)
            assert u.shape[1] == t
            parts = torch.einsum("hit,htd->itd", trace.weights(layer), u)  # (T, T, hidden)
            torch.testing.assert_close(parts.sum(1), raw[layer], rtol=1e-4, atol=1e-5)
            far = (j > i) | ((i - j >= WINDOW) & sliding[layer])  # what the block cannot see
            assert float(parts[far].abs().max()) == 0.0
            assert bool((parts[~far].abs().sum(-1) > 0).all())
    g = flow_graph(engine, trace, 0.0)
    attn = (g.kind == 0) & np.array(sliding)[g.src_level // 2]
    far = attn & (g.dst_pos - g.src_pos >= WINDOW)
    assert far.any() and (g.weight[far] == 0).all() and (g.head_shares[far] == 0).all()
    assert (g.weight[attn & ~far] > 0).any()


UNSPLIT = {  # families whose blocks are not added to the residual as they are
    "bloom": ("bloom", dict(n_layer=2, n_head=4, hidden_size=32)),
    "glm4": ("glm4", dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          hidden_size=32, intermediate_size=64, head_dim=8, pad_token_id=0,
                          eos_token_id=2, bos_token_id=1)),
}  # fmt: skip


@pytest.mark.parametrize("name", list(UNSPLIT))
def test_blocks_not_added_as_they_are_get_gradient_times_input_and_the_reason(tokenizer, name):
    """Bloom and GLM-4: "Why this token?" never raises; it names the layer in one line, keeps
    the model's logit and gives gradient × input (the same as a hand-written backward)."""
    from transformers import CONFIG_MAPPING

    from tests.families import seeded_model

    def config(_name: str, vocab: int):
        model_type, fields = UNSPLIT[name]
        return CONFIG_MAPPING[model_type](vocab_size=vocab, **fields)

    engine = Engine(seeded_model({}, name, config, tokenizer))
    run = engine.start(engine.tokenize("The cat sat on", chat=False), GREEDY, RunConfig(2))
    step = run.run_all()[-1]
    x = explain(engine, step)
    assert "does not add its attention and MLP outputs" in x.logits.unsplit
    assert "\n" not in x.logits.unsplit and not x.logits.heads.any()
    assert x.logits.logit == pytest.approx(float(step.logits[step.token.id]), rel=1e-4)
    ids = torch.tensor([list(step.context_ids)])
    with torch.enable_grad():
        embeds = engine.anatomy.embed(ids).detach().requires_grad_(True)
        logits = engine.model(inputs_embeds=embeds.clone(), use_cache=False).logits[0, -1]
        torch.log_softmax(logits.float(), -1)[step.token.id].backward()
    want = (embeds.grad * embeds).sum(-1)[0].detach().numpy()
    np.testing.assert_allclose(x.inputs.values, want, rtol=1e-4, atol=1e-6)
    assert explanation_dict(x)["unsplit"] == x.logits.unsplit


@pytest.mark.parametrize("change", [("scale", 0.5), ("scale", 3.0), ("mean", 1.0)])
def test_a_run_with_a_changed_head_splits_exactly(tiny_engine, change):
    """What if? "Why this token?" reads the model under the run's interventions: a head scaled
    or replaced by its prompt mean (a hook on the output projection) still splits the logit
    exactly over the heads (the check does not apply the hook a second time)."""
    from llm_lens.core.interventions import HeadEdit
    from llm_lens.core.loop.analyses import compute

    prompt = tiny_engine.tokenize("The cat sat on the mat because", chat=False)
    edits = [HeadEdit(layer, 1, *change) for layer in (0, 1)]
    run = tiny_engine.start(prompt, GREEDY, RunConfig(max_new_tokens=3), interventions=edits)
    run.run_all()
    for step in run.steps[:2]:
        x = compute("explain", tiny_engine, run, {"step": step.index, "vs": None})
        _check_split(x, step)
