"""The Engine on every family: tokens, logits, attention, residual and lens against the model's own.

Each family is a tiny random model (``tests/families.py``). References come from calling the
transformers model directly: ``generate()``, an uncached forward, eager ``output_attentions`` and
``output_hidden_states``; never through ``core``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from llm_lens.core import attention, layers
from llm_lens.core.anatomy import Anatomy
from llm_lens.core.attention import prompt_maps
from llm_lens.core.errors import ModelLoadError
from llm_lens.core.loop.engine import EAGER_PREFILL_LIMIT, Engine, RunConfig
from llm_lens.core.records import PromptTokens
from llm_lens.core.sampling import GREEDY
from tests.families import FAMILIES, WINDOW, WINDOWED, family_model

PROMPT = "The quick brown fox jumps over the lazy dog"
NEW = 4
ALL = list(FAMILIES)
LONG = ("gpt2", "falcon_mq", "gemma2", "mistral", "olmo2")  # one of each attention style
KV_HEADS = {"gpt2": 4, "gpt_neox": 4, "opt": 4, "falcon_new": 2, "falcon_mq": 1}
_runs: dict[tuple[str, int], Any] = {}


def _run(name: str, tokenizer: Any, long: bool = False) -> Any:
    """(engine, run) of a finished greedy run, built once per family and prompt kind."""
    key = (name, long)
    if key not in _runs:
        engine = Engine(family_model(name, tokenizer))
        if long:
            n = EAGER_PREFILL_LIMIT + 40
            ids = torch.randint(3, 1000, (n,), generator=torch.Generator().manual_seed(0))
            infos = tuple(engine.texts.info(int(i)) for i in ids)
            prompt = PromptTokens("x", "x", False, infos)
        else:
            prompt = engine.tokenize(PROMPT, chat=False)
        run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=2 if long else NEW))
        run.run_all()
        _runs[key] = engine, run
    return _runs[key]


def _reference(model: Any, ids: list[int]) -> Any:
    """An uncached full forward with the model's own eager attention."""
    model.set_attn_implementation("eager")
    with torch.inference_mode():
        return model(
            torch.tensor([ids]), use_cache=False, output_attentions=True, output_hidden_states=True
        )


def _lens(engine: Any, step: Any) -> np.ndarray:
    """The lens of the step's last-layer residual: (vocab,) logits through the final transform."""
    with torch.inference_mode():
        return layers.lens_logits(engine, torch.from_numpy(np.array(step.hidden[-1]))).numpy()


@pytest.mark.parametrize("name", ALL)
def test_greedy_tokens_equal_generate(loaded: Any, name: str) -> None:
    engine, run = _run(name, loaded.tokenizer)
    prompt = torch.tensor([run.prompt.ids])
    with torch.inference_mode():
        ref = engine.model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW, do_sample=False
        )
    assert run.generated_ids == ref[0, len(run.prompt) :].tolist()


@pytest.mark.parametrize("name", ALL)
def test_step_logits_attention_residual_and_lens_equal_the_model(loaded: Any, name: str) -> None:
    """Every step's cached logits and attention row, the prompt maps, the residual stream and
    the last lens row, against one uncached eager forward over the whole context."""
    engine, run = _run(name, loaded.tokenizer)
    context = list(run.steps[-1].context_ids)
    ref = _reference(engine.model, context)
    for step in run.steps:
        p = step.position
        want = ref.logits[0, p].float().numpy()
        np.testing.assert_allclose(step.logits, want, atol=1e-4 * np.abs(want).max())
        rows = np.stack([a[0, :, p, : p + 1].float().numpy() for a in ref.attentions])
        assert step.attention.shape == rows.shape  # (layers, heads, position + 1)
        np.testing.assert_allclose(step.attention, rows, atol=1e-5)
        np.testing.assert_allclose(_lens(engine, step), step.logits, atol=1e-4 * np.abs(want).max())
    t = len(run.prompt)
    hidden = run.prefill.hidden
    states = np.stack([h[0, :t].float().numpy() for h in ref.hidden_states[:-1]])
    np.testing.assert_allclose(hidden[:-1], states, atol=1e-5)  # row 0: the first layer's input
    for layer in range(engine.info.num_layers):
        for head in (0, engine.info.num_heads - 1):
            amap = attention.attention_map(engine, run.cache, hidden, layer, head)
            want_map = ref.attentions[layer][0, head, :t, :t].float().numpy()
            assert amap is not None and not amap.pooled
            np.testing.assert_allclose(amap.weights, want_map, atol=1e-5)


@pytest.mark.parametrize("name", LONG)
def test_long_prompt_rows_and_maps_equal_the_eager_maps(loaded: Any, name: str) -> None:
    """A prompt past EAGER_PREFILL_LIMIT prefills with SDPA (eager where soft-capped); its row
    and its full and pooled on-demand maps still equal the eager weights."""
    engine, run = _run(name, loaded.tokenizer, long=True)
    t = len(run.prompt)
    ref = _reference(engine.model, list(run.prompt.ids))
    last = np.stack([a[0, :, -1].float().numpy() for a in ref.attentions])
    np.testing.assert_allclose(run.steps[0].attention, last, atol=1e-5)
    layer, head = engine.info.num_layers - 1, 1
    want = ref.attentions[layer][0, head].float().numpy()  # (T, T)
    full = attention.attention_map(engine, run.cache, run.prefill.hidden, layer, head, 1024)
    assert full is not None and full.weights.shape == (t, t)
    np.testing.assert_allclose(full.weights, want, atol=1e-5)
    pooled = attention.attention_map(engine, run.cache, run.prefill.hidden, layer, head, 64)
    block = -(-t // 64)
    assert pooled is not None and pooled.pooled
    np.testing.assert_allclose(pooled.weights, attention.pool_rows(want, block), atol=1e-5)


@pytest.mark.parametrize("name", LONG)
def test_one_head_map_of_a_long_prompt_skips_the_earlier_layers(
    loaded: Any, name: str, monkeypatch: Any
) -> None:
    """Past EVERY_HEAD_SCORES one head's map is computed alone (its key/value head picked as
    ``repeat_kv`` groups them), the layers before are passed over, and the map still equals the
    model's own eager weights; another head of the same layer reuses the layer's kept queries
    and keys (no attention module runs again) and equals the eager weights too."""
    engine, run = _run(name, loaded.tokenizer, long=True)
    monkeypatch.setattr(prompt_maps, "MAP_MEMO_BYTES", 0)
    monkeypatch.setattr(prompt_maps, "EVERY_HEAD_SCORES", 0)
    ref = _reference(engine.model, list(run.prompt.ids))
    layer = engine.info.num_layers - 1
    called: list[int] = []
    hooks = [
        engine.anatomy.attn[n].register_forward_pre_hook(lambda *_a, n=n: called.append(n))
        for n in range(engine.info.num_layers)
    ]
    hidden = run.prefill.hidden
    alone = name in ONE_HEAD_ALONE
    try:
        for head in (0, engine.info.num_heads - 1):
            engine.map_memo.clear()
            amap = attention.attention_map(engine, run.cache, hidden, layer, head, 1024)
            assert amap is not None
            want = ref.attentions[layer][0, head].float().numpy()
            np.testing.assert_allclose(amap.weights, want, atol=1e-5)
        assert set(called) == {layer}  # no earlier layer's attention ran
        ran = len(called)
        for head in range(engine.info.num_heads - 1):
            amap = attention.attention_map(engine, run.cache, hidden, layer, head, 1024)
            want = ref.attentions[layer][0, head].float().numpy()
            np.testing.assert_allclose(amap.weights, want, atol=1e-5)
        # every head's kept queries and keys: no rerun; one head's alone: the layer runs again
        assert called == [layer] * (ran + (engine.info.num_heads - 1 if alone else 0))
        attention.attention_map(engine, run.cache, hidden, 0, 0, 1024)  # another layer: runs
        assert called[-1] == 0 and set(called) == {layer, 0}
    finally:
        for hook in hooks:
            hook.remove()


# families whose attention runs on one head's queries and keys alone (separate linears, heads in
# order, split by ``view(..., -1, head_dim)``, nothing mixing heads after them); the others
# project every head (fused projections, OLMo 2's query/key norms over every head, OPT's and
# StableLM's views naming their head counts)
ONE_HEAD_ALONE = {"qwen2", "qwen3", "gemma2", "gemma3", "mistral", "mixtral", "granite", "llama3"}


@pytest.mark.parametrize("name", ALL)
def test_a_heads_map_projected_alone_equals_the_models_own(
    loaded: Any, name: str, monkeypatch: Any
) -> None:
    """A one-head map (what long prompts ask) runs the layer's attention on that head's queries
    and its key/value head's keys alone where the layout allows it, checked against the whole
    projections; each head's map equals the model's own eager weights either way."""
    engine, run = _run(name, loaded.tokenizer)
    monkeypatch.setattr(prompt_maps, "EVERY_HEAD_SCORES", 0)  # the long prompt's one-head path
    monkeypatch.setattr(prompt_maps, "MAP_MEMO_BYTES", 0)
    t, layer, heads = len(run.prompt), engine.info.num_layers - 1, engine.info.num_heads
    ref = _reference(engine.model, list(run.prompt.ids))
    hidden = run.prefill.hidden
    engine.map_memo.clear()
    for head in range(heads):
        amap = attention.attention_map(engine, run.cache, hidden, layer, head)
        assert amap is not None
        want = ref.attentions[layer][0, head, :t, :t].float().numpy()
        np.testing.assert_allclose(amap.weights, want, atol=1e-5)
    module = engine.anatomy.attn[layer]
    assert prompt_maps._ALONE[module] == (name in ONE_HEAD_ALONE)
    if not hasattr(module, "q_proj"):
        return
    seen: dict[str, list[Any]] = {"q_proj": [], "v_proj": []}
    hooks = [getattr(module, n).register_forward_hook(lambda _m, _a, o, n=n: seen[n].append(o))
             for n in seen]  # fmt: skip
    try:
        with monkeypatch.context() as every:  # every head's projections, then head 1's map
            every.setattr(prompt_maps, "_projects_one_head", lambda *_a: False)
            engine.map_memo.clear()
            attention.attention_map(engine, run.cache, hidden, layer, 1)
        engine.map_memo.clear()
        attention.attention_map(engine, run.cache, hidden, layer, 1)
    finally:
        for hook in hooks:
            hook.remove()
    (whole_q, got_q), (whole_v, got_v) = seen["q_proj"], seen["v_proj"]
    if name not in ONE_HEAD_ALONE:
        assert torch.equal(got_q, whole_q) and torch.equal(got_v, whole_v)
        return
    width = whole_q.shape[-1] // heads  # head 1's query columns alone, one head of zero values
    torch.testing.assert_close(got_q, whole_q[..., width : 2 * width], rtol=0, atol=1e-5)
    assert got_v.shape[-1] == whole_v.shape[-1] // engine.info.num_kv_heads
    assert got_v.abs().max() == 0


@pytest.mark.parametrize("name", WINDOWED)
def test_windowed_layers_attend_only_inside_the_window(loaded: Any, name: str) -> None:
    engine, run = _run(name, loaded.tokenizer)
    windows = [getattr(engine.model.config, "layer_types", ["sliding_attention"] * 99)[i] for i in
               range(engine.info.num_layers)]  # fmt: skip
    last = run.steps[-1]
    for layer, kind in enumerate(windows):
        outside = last.attention[layer, :, : last.position + 1 - WINDOW]
        assert (np.abs(outside).max() == 0) == (kind == "sliding_attention"), (layer, kind)


@pytest.mark.parametrize("name", ALL)
def test_the_load_time_waits_check_runs_on_every_family(loaded: Any, name: str) -> None:
    """On a GPU the engine times the model's bare forward at load (``Engine._check_waits``);
    every family must run it, else its waits would go unmeasured for no reason."""
    engine, _ = _run(name, loaded.tokenizer)
    engine._round_trip()  # raises where the check would fall back to "not measured"


@pytest.mark.parametrize("name", ALL)
def test_describe_counts_the_kv_heads_the_attention_has(loaded: Any, name: str) -> None:
    info = family_model(name, loaded.tokenizer).info
    kv = KV_HEADS.get(name, 2)
    assert info.num_kv_heads == kv
    assert info.head_sharing.split()[0] == {4: "MHA", 2: "GQA", 1: "MQA"}[kv]
    assert info.attention_note == ""
    assert info.position_kind == ("learned" if name in ("gpt2", "opt") else "rope")


def test_overview_holds_every_layer_and_head(loaded: Any) -> None:
    engine, run = _run("gemma2", loaded.tokenizer)
    t = len(run.prompt)
    overview = attention.attention_overview(engine, run.cache, run.prefill.hidden, size=32)
    assert overview is not None and overview.shape == (4, 4, 32, 32)
    ref = _reference(engine.model, list(run.prompt.ids))
    for layer in range(4):
        np.testing.assert_allclose(
            overview[layer, :, :t, :t], ref.attentions[layer][0, :, :t, :t].numpy(), atol=1e-5
        )


def test_a_family_outside_the_interface_runs_without_maps(loaded: Any) -> None:
    """Bloom computes attention itself: no rows or maps, but tokens, logits and lens work."""
    from transformers import BloomConfig, BloomForCausalLM

    from llm_lens.core.loading import LoadedModel, describe

    torch.manual_seed(0)
    cfg = BloomConfig(vocab_size=len(loaded.tokenizer), hidden_size=32, n_layer=2, n_head=4)
    model = BloomForCausalLM(cfg).eval()
    engine = Engine(LoadedModel(model, loaded.tokenizer, describe(model, "b", "t", "t")))
    assert not engine.attention_maps
    assert engine.info.attention_note.startswith("BloomForCausalLM computes attention inside")
    run = engine.start(engine.tokenize(PROMPT, chat=False), GREEDY, RunConfig(max_new_tokens=2))
    step = run.run_all()[-1]
    assert np.all(step.attention == 0)
    assert attention.attention_map(engine, run.cache, run.prefill.hidden, 0, 0) is None
    np.testing.assert_allclose(_lens(engine, step), step.logits, atol=1e-4)


def test_unknown_layout_is_one_clear_error() -> None:
    class Odd(torch.nn.Module):
        config = type("C", (), {"get_text_config": lambda self, decoder: self})()

        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Linear(2, 2)

        def get_decoder(self) -> Any:
            return self.body

    with pytest.raises(ModelLoadError, match="Odd: cannot find the decoder layers"):
        Anatomy.of(Odd())
