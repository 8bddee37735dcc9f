"""Each intervention equals the same change written by hand on transformers' own forward:
a zeroed or scaled head (a pre-hook on the output projection), an MLP scaled, an attention block
off, a vector added to the residual stream, a residual patched, a token forgotten (a 2-D
attention mask with a 0 there), on tiny random models of several families and on SmolLM2; and
the hooks are gone when the run ends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core.interventions import (
    BlockEdit,
    Forget,
    HeadEdit,
    InterventionError,
    ResidualAdd,
    ResidualPatch,
    applied,
)
from llm_lens.core.loop.engine import Engine
from tests.core.interventions.reference import PROMPT, assert_same, engine_greedy, greedy_reference
from tests.families import FAMILIES as ALL_FAMILIES
from tests.families import family_model

FAMILIES = ["llama3", "gpt2", "qwen2", "qwen3", "gemma2", "mixtral", "gpt_neox", "opt"]


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request: Any, tokenizer: Any) -> tuple[str, Engine]:
    return request.param, Engine(family_model(request.param, tokenizer))


def _prompt_ids(engine: Engine) -> list[int]:
    return list(engine.tokenize(PROMPT, chat=False).ids)


def _layers(model: Any) -> Any:
    """Each family's block list, as its modeling file names it."""
    base = model.base_model
    for name in ("layers", "h"):
        if hasattr(base, name):
            return getattr(base, name)
    return base.decoder.layers  # OPT


def _out_proj(name: str, model: Any, layer: int) -> Any:
    block = _layers(model)[layer]
    if name == "gpt2":
        return block.attn.c_proj
    if name == "gpt_neox":
        return block.attention.dense
    if name == "opt":
        return block.self_attn.out_proj
    return block.self_attn.o_proj


def _mlp(name: str, model: Any, layer: int) -> Any:
    block = _layers(model)[layer]
    return block.fc2 if name == "opt" else block.mlp


def _hooked_reference(engine: Engine, module: Any, hook: Any, pre: bool) -> Any:
    register = module.register_forward_pre_hook if pre else module.register_forward_hook
    handle = register(hook)
    try:
        return greedy_reference(engine.model, _prompt_ids(engine))
    finally:
        handle.remove()


def test_zeroed_head_equals_a_hand_pre_hook_on_the_output_projection(fam: Any) -> None:
    name, engine = fam
    heads = engine.model.config.num_attention_heads

    def zero(_m: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        x = args[0].clone()  # (batch, seq, heads * head_dim)
        width = x.shape[-1] // heads
        x[..., 2 * width : 3 * width] = 0
        return (x,)

    ref = _hooked_reference(engine, _out_proj(name, engine.model, 1), zero, pre=True)
    ours = engine_greedy(engine, [HeadEdit(1, 2, "scale", 0.0)])
    assert_same(ours, ref)
    plain = engine_greedy(engine, [])
    assert not np.allclose(plain[1], ours[1], atol=1e-4)  # the head mattered


def test_head_mean_over_the_prompt_equals_a_hand_hook(fam: Any) -> None:
    name, engine = fam
    heads, kept = engine.model.config.num_attention_heads, {}

    def mean(_m: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        x = args[0].clone()
        width = x.shape[-1] // heads
        part = x[..., 0:width]
        if "mean" not in kept:
            kept["mean"] = part.mean(dim=1, keepdim=True)
        x[..., 0:width] = kept["mean"]
        return (x,)

    ref = _hooked_reference(engine, _out_proj(name, engine.model, 0), mean, pre=True)
    assert_same(engine_greedy(engine, [HeadEdit(0, 0, "mean")]), ref)


def test_scaled_mlp_equals_a_hand_forward_hook(fam: Any) -> None:
    name, engine = fam
    ref = _hooked_reference(
        engine, _mlp(name, engine.model, 1), lambda _m, _i, out: out * 0.5, pre=False
    )
    assert_same(engine_greedy(engine, [BlockEdit(1, "mlp", 0.5)]), ref)


def test_attention_off_equals_a_hand_forward_hook(fam: Any) -> None:
    name, engine = fam
    attn = engine.anatomy.attn[0]
    ref = _hooked_reference(engine, attn, lambda _m, _i, out: (out[0] * 0, *out[1:]), pre=False)
    assert_same(engine_greedy(engine, [BlockEdit(0, "attn", 0.0)]), ref)


def _residual_hook(rows: dict[int, torch.Tensor], add: bool) -> Any:
    """A pre-hook on a block: its input at the prompt's positions ``rows`` edited (prefill only)."""

    def hook(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        h = (args[0] if args else kwargs["hidden_states"]).clone()
        if h.shape[1] > 1:
            for p, v in rows.items():
                h[:, p] = h[:, p] + v if add else v
        return ((h, *args[1:]), kwargs) if args else (args, kwargs | {"hidden_states": h})

    return hook


def test_residual_add_equals_a_hand_hook_adding_the_vector(fam: Any) -> None:
    name, engine = fam
    vec = np.random.default_rng(1).normal(size=engine.model.config.hidden_size)
    hook = _residual_hook({p: torch.tensor(vec, dtype=torch.float32) for p in (2, 3)}, add=True)
    handle = _layers(engine.model)[1].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        ref = greedy_reference(engine.model, _prompt_ids(engine))
    finally:
        handle.remove()
    assert_same(engine_greedy(engine, [ResidualAdd(1, (2, 3), tuple(vec))]), ref)


def test_residual_patch_equals_a_hand_hook_replacing_the_rows(fam: Any) -> None:
    name, engine = fam
    values = np.random.default_rng(2).normal(size=(2, engine.model.config.hidden_size))
    rows = {p: torch.tensor(v, dtype=torch.float32) for p, v in zip((1, 4), values, strict=True)}
    handle = _layers(engine.model)[0].register_forward_pre_hook(
        _residual_hook(rows, add=False), with_kwargs=True
    )
    try:
        ref = greedy_reference(engine.model, _prompt_ids(engine))
    finally:
        handle.remove()
    patch = ResidualPatch(0, (1, 4), tuple(tuple(v) for v in values))
    assert_same(engine_greedy(engine, [patch]), ref)


def test_forgetting_a_token_equals_an_attention_mask_that_hides_it(fam: Any) -> None:
    name, engine = fam
    where = 3

    def mask(length: int) -> Any:
        m = torch.ones((1, length), dtype=torch.long)
        m[0, where] = 0
        return m

    ref = greedy_reference(engine.model, _prompt_ids(engine), mask=mask)
    ours = engine_greedy(engine, [Forget(where)])
    assert_same(ours, ref)
    assert not np.allclose(engine_greedy(engine, [])[1], ours[1], atol=1e-4)


def test_hooks_are_removed_when_the_run_ends(fam: Any) -> None:
    """Every hook an intervened run adds is gone after it (the shared test model may carry
    hooks of its own from other tests: those stay as they were)."""
    _name, engine = fam

    def hooks() -> set[tuple[int, str, int]]:
        return {
            (id(m), kind, key)
            for m in engine.model.modules()
            for kind, held in (("fwd", m._forward_hooks), ("pre", m._forward_pre_hooks))
            for key in held
        }

    held_before = hooks()
    before = engine_greedy(engine, [])
    engine_greedy(engine, [HeadEdit(1, 1, "scale", 0.0), Forget(2), BlockEdit(0, "mlp", 0.0)])
    after = engine_greedy(engine, [])
    assert after[0] == before[0]
    np.testing.assert_array_equal(after[1], before[1])
    with applied(engine.model, [BlockEdit(0, "attn", 0.0)]):
        assert hooks() != held_before  # the check sees the hooks an intervention adds
    assert hooks() == held_before


def test_an_impossible_intervention_is_refused_before_the_run(fam: Any) -> None:
    _name, engine = fam
    prompt = engine.tokenize(PROMPT, chat=False)
    from llm_lens.core.sampling import GREEDY

    for bad, words in [
        (HeadEdit(9, 0), "no layer 9"),
        (HeadEdit(0, 99), "no head 99"),
        (ResidualAdd(0, (), (1.0, 2.0)), "the vector has 2 numbers"),
    ]:
        with pytest.raises(InterventionError, match=words):
            engine.start(prompt, GREEDY, interventions=[bad])


@pytest.mark.slow
def test_zeroed_head_on_smollm2_equals_a_hand_pre_hook(engine: Engine) -> None:
    heads = engine.model.config.num_attention_heads

    def zero(_m: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        x = args[0].clone()
        width = x.shape[-1] // heads
        x[..., 4 * width : 5 * width] = 0
        return (x,)

    proj = engine.model.model.layers[7].self_attn.o_proj
    ref = _hooked_reference(engine, proj, zero, pre=True)
    assert_same(engine_greedy(engine, [HeadEdit(7, 4, "scale", 0.0)]), ref)


def test_the_notebook_face_runs_an_intervened_run(tiny_engine: Any) -> None:
    import llm_lens

    changed, _steps = llm_lens.generate_text(
        tiny_engine, PROMPT, llm_lens.GREEDY, chat=False, max_new_tokens=2,
        interventions=[llm_lens.parse_spec("attn:1=0"), llm_lens.HeadEdit(0, 1)],
    )  # fmt: skip
    assert changed.interventions == (BlockEdit(1, "attn", 0.0), HeadEdit(0, 1, "scale", 0.0))
    assert changed.summary().extra["interventions"][0]["kind"] == "block"
    plain, _ = llm_lens.generate_text(
        tiny_engine, PROMPT, llm_lens.GREEDY, chat=False, max_new_tokens=2
    )
    assert "interventions" not in plain.summary().extra
    assert not np.allclose(plain.steps[0].logits, changed.steps[0].logits, atol=1e-4)


def test_steering_every_position_equals_a_hand_hook_in_every_pass(fam: Any) -> None:
    """A ResidualAdd without positions is added in the prefill and in each decode step."""
    name, engine = fam
    vec = torch.tensor(np.random.default_rng(3).normal(size=engine.model.config.hidden_size))

    def add(_m: Any, a: Any, k: Any) -> Any:
        h = (a[0] if a else k["hidden_states"]) + vec.to(torch.float32)
        return ((h, *a[1:]), k) if a else (a, k | {"hidden_states": h})

    handle = _layers(engine.model)[1].register_forward_pre_hook(add, with_kwargs=True)
    try:
        ref = greedy_reference(engine.model, _prompt_ids(engine))
    finally:
        handle.remove()
    assert_same(engine_greedy(engine, [ResidualAdd(1, (), tuple(vec.tolist()))]), ref)


@pytest.mark.parametrize("name", ["llama3", "gemma2"])
def test_forgetting_on_a_long_prompt_read_with_sdpa(tokenizer: Any, name: str) -> None:
    """Past the eager limit the prefill runs SDPA with the boolean mask; the token is still
    hidden exactly as a 2-D mask hides it (Gemma 2: windowed layers too)."""
    from llm_lens.core.loop.engine import EAGER_PREFILL_LIMIT, RunConfig
    from llm_lens.core.sampling import GREEDY

    engine = Engine(family_model(name, tokenizer))
    prompt = engine.tokenize(" ".join(f"{PROMPT} {i}" for i in range(40)), chat=False)
    ids = list(prompt.ids)
    assert len(ids) > EAGER_PREFILL_LIMIT
    where = len(ids) - 3  # inside Gemma 2's window of the last query

    def mask(length: int) -> Any:
        m = torch.ones((1, length), dtype=torch.long)
        m[0, where] = 0
        return m

    ref = greedy_reference(engine.model, ids, steps=2, mask=mask)
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=2), interventions=[Forget(where)])
    run.run_all()
    assert_same((run.generated_ids, run.steps[0].logits, run), ref)
    plain = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=1))
    plain.run_all()
    assert not np.allclose(plain.steps[0].logits, run.steps[0].logits, atol=1e-4)


@pytest.mark.parametrize("name", sorted(ALL_FAMILIES))
def test_every_kind_runs_on_every_family(tokenizer: Any, name: str) -> None:
    """Each kind hooks and changes the first step's logits on every family the app loads."""
    engine = Engine(family_model(name, tokenizer))
    vec = tuple(np.random.default_rng(5).normal(size=engine.model.config.hidden_size) * 3)
    plain = engine_greedy(engine, [], steps=2)
    for item in [
        HeadEdit(0, 1, "scale", 0.0), HeadEdit(1, 0, "mean"), BlockEdit(0, "mlp", 0.0),
        BlockEdit(0, "attn", 0.0), ResidualAdd(1, (), vec), Forget(2),
    ]:  # fmt: skip
        changed = engine_greedy(engine, [item], steps=2)
        assert not np.allclose(changed[1], plain[1], atol=1e-6), item
