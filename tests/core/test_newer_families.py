"""The families the sweep found last (tests/newer_families.py), each checked against its own
model: greedy tokens and logits = ``generate()``, the lens's last row = the output, the cache's
bytes = the formula from the loaded model and from ``llm-lens kv``'s config alone, and "Why
this token?" a split or its one-line reason."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core import layers
from llm_lens.core.attention import attention_map, attention_overview
from llm_lens.core.cards import kvcache_card
from llm_lens.core.interventions import Forget, HeadEdit, InterventionError
from llm_lens.core.kvcache import build_report, format_report, layout_from_config
from llm_lens.core.kvcache.formula import per_layer_terms
from llm_lens.core.loop.analyses import compute
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.families import assert_greedy_equals_generate
from tests.newer_families import NEWER, UNCACHED, newer_model

PROMPT = "The quick brown fox jumps over the lazy dog"
NEW = 4
ALL = list(NEWER)
RUNS = ALL + list(UNCACHED)  # the uncached step mode too: GPT-1, CPM-Ant
_runs: dict[str, Any] = {}


def _run(name: str, tokenizer: Any) -> Any:
    """(engine, run) of a finished greedy run of the family, built once."""
    if name not in _runs:
        engine = Engine(newer_model(name, tokenizer))
        run = engine.start(engine.tokenize(PROMPT, chat=False), GREEDY, RunConfig(NEW))
        run.run_all()
        _runs[name] = engine, run
    return _runs[name]


@pytest.mark.parametrize("name", RUNS)
def test_greedy_tokens_and_logits_equal_generate(tokenizer: Any, name: str) -> None:
    engine, run = _run(name, tokenizer)
    assert_greedy_equals_generate(engine, run)


@pytest.mark.parametrize("name", RUNS)
def test_last_lens_row_is_the_models_output(tokenizer: Any, name: str) -> None:
    engine, run = _run(name, tokenizer)
    for step in run.steps:
        with torch.inference_mode():
            lens = layers.lens_logits(engine, torch.from_numpy(np.array(step.hidden)))
        scale = np.abs(step.logits).max()
        np.testing.assert_allclose(lens[-1].numpy(), step.logits, atol=1e-5 * scale)


@pytest.mark.parametrize("name", ALL)
def test_cache_bytes_equal_the_formula_and_the_config(tokenizer: Any, name: str) -> None:
    """Measured = the loaded model's formula at every step, and = ``llm-lens kv``'s from the
    config.json alone (which builds the config's own modules to learn each layer's heads)."""
    engine, run = _run(name, tokenizer)
    cfg = engine.model.config.to_dict()
    layout = layout_from_config(cfg)
    for step in run.steps:
        assert step.kv.bytes_total == step.kv.formula_bytes > 0
        assert layout.total_bytes(step.kv.tokens, engine.info.dtype_bytes) == step.kv.growing_bytes
    report = build_report("m", cfg, run.steps[-1].kv.tokens, 1, "float32")
    assert report["total_bytes"] == run.steps[-1].kv.growing_bytes


@pytest.mark.parametrize("name", RUNS)
def test_why_this_token_splits_or_says_why(tokenizer: Any, name: str) -> None:
    """A split that adds up to the logit (every head of every layer in it), or the whole logit
    left as the residual with its one-line reason; never an exception."""
    engine, run = _run(name, tokenizer)
    step = run.steps[-1]
    x = compute("explain", engine, run, {"step": len(run.steps) - 1})
    logit = float(step.logits[step.token.id])
    parts = x.logits
    assert parts.heads.shape[0] == engine.info.num_layers
    if parts.unsplit:
        assert "\n" not in parts.unsplit and parts.residual == pytest.approx(logit, abs=1e-4)
    else:
        assert parts.sum + parts.residual == pytest.approx(logit, abs=1e-3 * abs(logit) + 1e-3)


def test_mimo_sliding_layers_keep_twice_the_kv_heads(tokenizer: Any) -> None:
    """MiMo-V2-Flash's attention module doubles the K/V heads of its sliding layers; its
    config says 2 for every layer. The loaded model, the config's layout and the cache agree."""
    engine, run = _run("mimo_v2_flash", tokenizer)
    assert engine.info.layer_kv_heads == (2, 4)
    layout = layout_from_config(engine.model.config.to_dict())
    assert layout.layer_kv_heads == (2, 4) and layout.num_kv_heads == 2
    kv = run.steps[-1].kv
    held = layout.held_tokens(kv.tokens)  # the sliding layer: its window − 1
    assert kv.per_layer[:, 0].tolist() == [2 * 8 * held[0] * 4, 4 * 8 * held[1] * 4]


def test_inkling_layers_have_query_heads_of_their_own(tokenizer: Any) -> None:
    """Inkling's sliding layer has 8 query heads, its full layer 4: the records are the widest
    layer's wide, a layer's heads past its own count stay empty, and its map is not asked."""
    engine, run = _run("inkling", tokenizer)
    info = engine.info
    assert info.layer_heads == (8, 4) and (info.num_heads, info.num_kv_heads) == (8, 4)
    assert info.layer_kv_heads == (4, 2) and info.layer_head_dims == (16, 8)
    assert [len(g) for g in info.gqa_groups_in(0)] == [2] * 4
    assert [len(g) for g in info.gqa_groups_in(1)] == [2] * 2
    for step in run.steps:
        assert step.attention.shape[:2] == (2, 8)
        np.testing.assert_allclose(step.attention[0].sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(step.attention[1, :4].sum(-1), 1.0, atol=1e-5)
        assert not step.attention[1, 4:].any()
    hidden = np.asarray(run.prefill.hidden)
    assert attention_map(engine, None, hidden, 1, 5) is None  # layer 1 has no head 5
    for layer, head in ((0, 7), (1, 3)):
        amap = attention_map(engine, None, hidden, layer, head)
        assert amap is not None
        np.testing.assert_allclose(np.asarray(amap.weights).sum(-1), 1.0, atol=1e-5)
    overview = attention_overview(engine, None, hidden)
    assert overview is not None and overview.shape[:2] == (2, 8) and not overview[1, 4:].any()


def test_inkling_head_interventions_are_checked_per_layer(tokenizer: Any) -> None:
    """A head past a layer's own count is refused in one line naming that layer's range; one
    inside it changes the run (the head's slice of that layer's own heads, not a wider view)."""
    engine, run = _run("inkling", tokenizer)
    prompt = engine.tokenize(PROMPT, chat=False)
    with pytest.raises(InterventionError, match=r"no head 5 \(layer 1 has heads 0-3\)"):
        engine.start(prompt, GREEDY, RunConfig(1), interventions=[HeadEdit(1, 5)])
    for layer, head in ((0, 7), (1, 3)):
        edited = engine.start(prompt, GREEDY, RunConfig(1), interventions=[HeadEdit(layer, head)])
        edited.run_all()
        assert not np.allclose(edited.steps[0].logits, run.steps[0].logits)


def test_longcat_block_holds_two_sublayers_cache_layers(tokenizer: Any) -> None:
    """LongCat-Flash: one row a block, its cache one layer a sublayer. Each block's K/V row is
    its two cache layers' bytes (2i and 2i + 1), each its latent over every token; its
    attention rows are its first sublayer's own (rows of probabilities)."""
    engine, run = _run("longcat_flash", tokenizer)
    info, kv = engine.info, run.steps[-1].kv
    assert info.num_layers == 2 and len(engine.anatomy.layers) == 2
    assert engine.anatomy.sublayers == 2
    assert [a.layer_idx for a in engine.anatomy.attn] == [0, 2]
    assert info.latent_dims == (2 * (16 + 8),) * 2  # two latents (rank + rotary key) a block
    layers = run.cache.layers
    assert len(layers) == 4
    for block in range(2):
        pair = layers[2 * block : 2 * block + 2]
        want = sum(la.keys.numel() * 4 + la.values.numel() * 4 for la in pair)
        assert int(kv.per_layer[block].sum()) == want
    assert kv.per_layer.sum() == kv.bytes_total == 4 * (16 + 8) * 4 * kv.tokens
    for step in run.steps:
        np.testing.assert_allclose(step.attention.sum(-1), 1.0, atol=1e-5)
    assert kv.mha_bytes == 2 * 2 * (2 * 4 * 8) * 4 * kv.tokens  # two sublayers' K/V a block
    line = f"2 blocks × 2 sublayers × 24 latent × 4 bytes × {kv.tokens} tokens = "
    assert line + f"{kv.bytes_total:,} bytes" in kvcache_card(info, run.steps[-1]).headline


def test_longcat_maps_are_each_blocks_first_sublayers_own(tokenizer: Any) -> None:
    """A block's attention map is its first attention sublayer's own eager weights (the model
    run with output_attentions, read by a hook on that module), not its second's."""
    engine, run = _run("longcat_flash", tokenizer)
    got: dict[int, torch.Tensor] = {}
    mods = [sub for block in engine.anatomy.layers for sub in block.self_attn]
    hooks = [
        m.register_forward_hook(lambda _m, _a, o, i=i: got.update({i: o[1]}))
        for i, m in enumerate(mods)
    ]
    before = engine.model.config._attn_implementation
    engine.model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            engine.model(torch.tensor([run.prompt.ids]), output_attentions=True)
    finally:
        engine.model.set_attn_implementation(before)
        for h in hooks:
            h.remove()
    hidden = np.asarray(run.prefill.hidden)
    for layer in (0, 1):
        amap = attention_map(engine, None, hidden, layer, 1)
        assert amap is not None
        want = got[2 * layer][0, 1].float().numpy()
        np.testing.assert_allclose(np.asarray(amap.weights), want, atol=1e-6)
        assert not np.allclose(np.asarray(amap.weights), got[2 * layer + 1][0, 1].float().numpy())


def test_longcat_forget_hides_the_token_from_every_sublayer(tokenizer: Any) -> None:
    """Forgetting a prompt token hides it from both attention sublayers of every block (each
    is handed the mask hiding that key from the last query), and changes the run."""
    engine, run = _run("longcat_flash", tokenizer)
    seen: list[bool] = []

    def look(_m: Any, _args: Any, kw: dict[str, Any], _out: Any) -> None:
        mask = kw["attention_mask"]  # (batch, 1, q, keys): boolean True reads, or additive
        row = mask[0, 0, -1, 2]
        seen.append(bool(~row) if mask.dtype == torch.bool else bool(row < 0))

    mods = [sub for block in engine.anatomy.layers for sub in block.self_attn]
    hooks = [m.register_forward_hook(look, with_kwargs=True) for m in mods]
    try:
        forgot = engine.start(
            engine.tokenize(PROMPT, chat=False), GREEDY, RunConfig(1), interventions=[Forget(2)]
        )
        forgot.run_all()
    finally:
        for h in hooks:
            h.remove()
    assert len(seen) >= 4 and all(seen[:4])  # the prefill: all four sublayers hide key 2
    assert not np.allclose(forgot.steps[0].logits, run.steps[0].logits)


def test_kv_report_writes_the_per_layer_formula_that_adds_up(tokenizer: Any) -> None:
    """``llm-lens kv`` on MiMo's config: one term per kind of layer (its full layer's 2 K/V
    heads, its sliding layer's 4 over its window), and the terms add up to the total."""
    engine, run = _run("mimo_v2_flash", tokenizer)
    tokens = run.steps[-1].kv.tokens
    report = build_report("m", engine.model.config.to_dict(), tokens, 1, "float32")
    text = format_report(report)
    held = min(tokens, 4)  # the sliding layer's window − 1
    want = f"(1 × 2 × 2 × 8 × 4 × {tokens} + 1 × 2 × 4 × 8 × 4 × {held}) = "
    assert want + f"{report['total_bytes']} bytes" in text
    assert 2 * 2 * 8 * 4 * tokens + 2 * 4 * 8 * 4 * held == report["total_bytes"]


def test_kv_card_sums_per_kind_of_layer(tokenizer: Any) -> None:
    """The KV cache card's arithmetic adds up where layers differ in K/V heads (MiMo) and in
    query heads, head size and state (Inkling): each term one kind of layer, the sum the
    measured K/V."""
    for name in ("mimo_v2_flash", "inkling"):
        engine, run = _run(name, tokenizer)
        step = run.steps[-1]
        terms = per_layer_terms(engine.info, step.kv.tokens, step.kv.windows)
        total = sum(int(np.prod([int(x) for x in t.split(" × ")])) for t in terms.split(" + "))
        assert total == step.kv.growing_bytes == step.kv.formula_bytes - step.kv.state_bytes
        assert f"{terms} = {total:,} bytes of K/V" in kvcache_card(engine.info, step).headline


def test_inkling_full_mha_counts_each_layers_own_query_heads(tokenizer: Any) -> None:
    """ "With full MHA" keeps K/V for each layer's own query heads (8 in the sliding layer, 4
    in the full one), not the widest layer's count in every layer."""
    engine, run = _run("inkling", tokenizer)
    kv = run.steps[-1].kv
    held = [min(kv.tokens, 4), kv.tokens]  # the sliding layer's window − 1; all
    want = sum(2 * h * d * 4 * n for h, d, n in zip((8, 4), (16, 8), held, strict=True))
    assert kv.mha_bytes == want + kv.state_bytes


def test_per_layer_head_counts_from_a_hand_edited_file_fall_back_to_the_model_wide() -> None:
    """A session's model record is read back into a ModelInfo: a per-layer count that is not
    a whole number up to the model-wide one reads as the model-wide count, never raises."""
    from llm_lens.core.model_info import ModelInfo

    info = ModelInfo("m", "s", "A", 3, 8, 4, 8, 64, 100, 512, "float32", "cpu", 1, "rope",
                     None, "w", layer_heads=(4, "x", 99), layer_kv_heads=(2, None, -1))  # type: ignore[arg-type]  # fmt: skip
    assert [info.heads_in(n) for n in range(4)] == [4, 8, 8, 8]
    assert [info.kv_heads_in(n) for n in range(4)] == [2, 4, 4, 4]


@pytest.mark.parametrize("name", list(UNCACHED))
def test_uncached_step_feeds_the_whole_sequence_as_generate_does(tokenizer: Any, name: str) -> None:
    """Each decode step is fed every token so far (what the model's own
    prepare_inputs_for_generation feeds it): its residual stream is the full forward's last
    row, its attention row the full forward's (or, where the model computes attention in its
    own code, all zero with the one-line note: never a made-up row), and its prefill keeps
    one row per prompt token (CPM-Ant's layers also read 4 prefix tokens of its own)."""
    engine, run = _run(name, tokenizer)
    assert engine.feeds_whole
    assert run.prefill is not None and run.prefill.hidden.shape[1] == len(run.prompt)
    # GPT-1's every step is a full forward; CPM-Ant's own forward over the whole sequence
    # without its cache is not what generate() computes past step 0, so its prefill is compared
    step = run.steps[-1] if not engine.keeps_cache else run.steps[0]
    ids = torch.tensor([list(step.context_ids)])  # what the step read
    with torch.inference_mode():
        out = engine.model(ids, output_hidden_states=True, output_attentions=True, use_cache=False)
    np.testing.assert_allclose(step.logits, out.logits[0, -1].numpy(), atol=1e-5)
    last = out.hidden_states[0][0, -1].numpy()  # the first layer's input at the new token
    np.testing.assert_allclose(step.hidden[0], last, atol=1e-5)
    if engine.attention_maps:
        full = np.stack([a[0, :, -1].numpy() for a in out.attentions])  # (layers, heads, T)
        np.testing.assert_allclose(step.attention, full, atol=1e-5)
    else:
        assert not step.attention.any() and "own code" in engine.info.attention_note


def test_gpt1_holds_no_cache_and_says_so(tokenizer: Any) -> None:
    """GPT-1 keeps no KV cache: every step's record says none is held (0 bytes, no formula
    to compare with) and counts the tokens the step re-read; the card says it in one line."""
    engine, run = _run("openai-gpt", tokenizer)
    assert not engine.keeps_cache
    for step in run.steps:
        kv = step.kv
        assert kv.no_cache and kv.bytes_total == kv.formula_bytes == kv.mha_bytes == 0
        assert kv.tokens == step.position + 1 and not kv.per_layer.any()
    card = kvcache_card(engine.info, run.steps[-1])
    assert "keeps no KV cache" in card.headline and "\n" not in card.headline
    assert f"re-reads all {run.steps[-1].kv.tokens} tokens" in card.headline


def test_cpmant_keeps_its_cache_and_the_formula_holds(tokenizer: Any) -> None:
    """CPM-Ant is fed the whole sequence but keeps (and reads) its cache: measured bytes =
    the formula at every step, counting its 4 prefix tokens among those held."""
    engine, run = _run("cpmant", tokenizer)
    assert engine.keeps_cache
    for step in run.steps:
        assert not step.kv.no_cache and step.kv.bytes_total == step.kv.formula_bytes > 0
        assert step.kv.tokens == step.position + 1 + 4  # its prompt_length prefix


def test_kv_report_says_gpt1_keeps_no_cache(tokenizer: Any) -> None:
    """``llm-lens kv`` on GPT-1's config alone: no bytes, and the one line that says why
    (its causal-LM class's forward takes no cache), never a formula of a cache it never keeps."""
    engine, _run_ = _run("openai-gpt", tokenizer)
    report = build_report("g", engine.model.config.to_dict(), 100, 1, "float32")
    assert report["no_cache"] and report["total_bytes"] == report["mha_total_bytes"] == 0
    text = format_report(report)
    assert text.splitlines()[-1].startswith("This model keeps no KV cache: 0 bytes held")
    assert "re-reads all 100 tokens" in text and "formula" not in text


@pytest.mark.parametrize("name", list(UNCACHED))
def test_uncached_runs_start_from_a_prefill_and_branch(tokenizer: Any, name: str) -> None:
    """A run from the prompt's prefill (compare, shared prefixes) and a branch (its own prompt
    re-read whole, as generate() would) choose what a fresh run of the same prompt chooses."""
    from llm_lens.core.runs.branching import branch

    engine, run = _run(name, tokenizer)
    started = engine.start_from(
        run.prompt, GREEDY, engine.prefill(run.prompt).fork(), RunConfig(NEW)
    )
    assert started.run_all() and started.generated_ids == run.generated_ids
    child = branch(engine, run, 1, 7, GREEDY, RunConfig(2))
    child.run_all()
    fresh = engine.start(child.prompt, GREEDY, RunConfig(2))
    fresh.run_all()
    assert child.generated_ids == fresh.generated_ids
    np.testing.assert_allclose(child.steps[-1].logits, fresh.steps[-1].logits, atol=1e-5)


def test_gpt1_session_keeps_that_no_cache_is_held(tokenizer: Any, tmp_path: Any) -> None:
    """A saved GPT-1 run read back still says no cache is held (not a formula of 0 bytes)."""
    from llm_lens.core.sessions.format import Session, session_from_run
    from llm_lens.core.sessions.read import load_session
    from llm_lens.core.sessions.write import save_session

    engine, run = _run("openai-gpt", tokenizer)
    path = tmp_path / "gpt1.llmlens"
    save_session(path, Session(engine.info.as_dict(), (session_from_run(run, engine.info),)))
    steps = load_session(path).runs[0].steps
    assert [s.kv.no_cache for s in steps] == [True] * len(run.steps)
    assert [s.kv.tokens for s in steps] == [s.kv.tokens for s in run.steps]
