"""Every number the panes show, on a model whose layers accelerate's device map put on disk,
equals the unsplit model's: tokens exactly, logits, residuals, attention rows and maps, the
lens, attribution, positions, embeddings and KV bytes within 1e-5. The bundled model with a
150 MiB cap (2 layers on the CPU, 28 read from disk) and three tiny families saved to a folder
and loaded with a 1 KiB cap (every weight on disk, the embeddings and head too)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from llm_lens.core.placement import parse_placement, weights_of
from tests.families import family_model

TOL = 1e-5
SKIP = {"timing", "timings_ms", "device_allocated", "device_reserved", "run_id"}
FAMILIES = ("gpt2", "gemma2", "mixtral")  # learned positions + Conv1D, post-norms, experts


def assert_same(a: Any, b: Any, path: str = "") -> None:
    """``a`` and ``b`` equal through dataclasses, tuples and dicts; arrays and floats within
    TOL (relative to the values' size), everything else exactly."""
    if dataclasses.is_dataclass(a):
        assert type(a) is type(b), path
        for f in dataclasses.fields(a):
            if f.name not in SKIP:
                assert_same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, np.ndarray):
        assert a.shape == b.shape, path
        if a.dtype.kind == "f" and a.size:
            scale = max(1.0, float(np.abs(a).max()))
            assert float(np.abs(a.astype(np.float64) - b).max()) <= TOL * scale, path
        else:
            assert np.array_equal(a, b), path
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float):
        assert abs(a - b) <= TOL * max(1.0, abs(a)), (path, a, b)
    else:
        assert a == b, (path, a, b)


def everything(engine: Any, tokens: int = 3, heavy: bool = True) -> dict[str, Any]:
    """A greedy run and every analysis a pane asks for, on ``engine``."""
    from llm_lens.core.loop.analyses import compute
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY

    run = engine.start(engine.tokenize("Hi there"), GREEDY, RunConfig(max_new_tokens=tokens))
    run.run_all()
    out: dict[str, Any] = {"steps": run.steps, "prefill": run.prefill.hidden}
    info = engine.info
    kinds = [
        ("lens", {"step": 1}),
        ("attention_map", {"layer": info.num_layers - 1, "head": 1}),
        ("attention_overview", {}),
        ("explain", {"step": 1}),
        ("neighbours", {"token_id": 100}),
        ("positions", {"positions": 16}),
    ]
    if heavy:
        kinds += [("prompt_lens", {}), ("embedding_projection", {})]
    for kind, args in kinds:
        try:
            out[kind] = compute(kind, engine, run, args)
        except ValueError as exc:  # a family attribution refuses: both must refuse alike
            out[kind] = f"refused: {exc}"
    return out


@pytest.fixture(scope="module")
def offloaded(engine):
    """The bundled model with a 150 MiB cap on the CPU: most layers read from disk."""
    from llm_lens.core.loading import load_model
    from llm_lens.core.loop.engine import Engine

    return Engine(load_model(placement=parse_placement(max_memory="cpu=150MiB")))


def test_the_bundled_model_offloaded_to_disk_computes_the_same_numbers(engine, offloaded):
    where = {w for _n, w, _b in offloaded.info.placement}
    assert where == {"cpu", "disk"} and offloaded.info.device == "cpu+disk"
    on_disk = [n for n, w, _b in offloaded.info.placement if w == "disk" and ".layers." in n]
    assert len(on_disk) > offloaded.info.num_layers // 2
    assert offloaded.info.placement and not engine.info.placement
    split, whole = everything(offloaded, heavy=False), everything(engine, heavy=False)
    assert [s.token.id for s in split["steps"]] == [s.token.id for s in whole["steps"]]
    assert_same(whole, split)
    kv = split["steps"][-1].kv
    assert kv.by_device == (("cpu", kv.bytes_total),)  # the cache sits where layers run


def test_between_calls_an_offloaded_layer_is_on_meta_and_weights_of_loads_it(offloaded):
    """What makes weights_of necessary, and what it does: real weights inside, meta after."""
    import torch

    layer = offloaded.anatomy.layers[-1]
    proj = offloaded.anatomy.attn[-1].o_proj
    assert proj.weight.device.type == "meta"
    with weights_of(offloaded.model, layer):
        assert proj.weight.device.type == "cpu" and torch.isfinite(proj.weight).all()
    assert proj.weight.device.type == "meta"
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        assert torch.isfinite(offloaded.model(ids).logits).all()  # the hooks still work after


@pytest.fixture(scope="module")
def family_pairs(tokenizer, tmp_path_factory):
    """Each family unsplit (from its folder) and read with every weight on disk."""
    from llm_lens.core.loading import load_model
    from llm_lens.core.loop.engine import Engine

    pairs = {}
    for name in FAMILIES:
        folder = tmp_path_factory.mktemp(name)
        family_model(name, tokenizer).model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        whole = Engine(load_model(str(folder), device="cpu"))
        split = load_model(
            str(folder), device="cpu", placement=parse_placement(max_memory="cpu=1KiB")
        )
        pairs[name] = (whole, Engine(split))
    return pairs


def runs(engine: Any) -> dict[str, Any]:
    """An intervened run, a branch, a beam search and a comparison on ``engine``."""
    from llm_lens.core.interventions import parse_spec
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.runs.beam import beam_search
    from llm_lens.core.runs.branching import branch
    from llm_lens.core.runs.compare import compare
    from llm_lens.core.sampling import GREEDY, SamplingParams

    prompt, config = engine.tokenize("Hi there"), RunConfig(max_new_tokens=2)
    last = engine.info.num_layers - 1
    edited = engine.start(prompt, GREEDY, config, interventions=[parse_spec(f"head:{last}.1=0")])
    edited.run_all()
    run = engine.start(prompt, GREEDY, config)
    run.run_all()
    try:  # a sliding-window cache past its window cannot be cropped: both refuse alike
        branched: Any = branch(engine, run, 0, 100, GREEDY, config).run_all()
    except RuntimeError as exc:
        branched = f"refused: {exc}"
    beams = beam_search(engine, prompt, 2, 2)
    sampled = [SamplingParams(temperature=0.8, seed=s) for s in (1, 2)]
    compared = compare(engine, prompt, sampled, config)
    return {
        "edited": edited.steps,
        "branched": branched,
        "beam": beams.token_ids,
        "beam_score": beams.score,
        "compared": [[s.token.id for s in r.steps] for r in compared.runs],
        "compared_logits": [[s.top_logits for s in r.steps] for r in compared.runs],
    }


@pytest.mark.parametrize("name", FAMILIES)
def test_a_family_read_from_disk_computes_the_same_numbers(family_pairs, name):
    whole, split = family_pairs[name]
    assert {w for _n, w, _b in split.info.placement} == {"disk"}
    assert split.anatomy.embed.weight.device.type == "meta"  # so the table is read through
    got, want = everything(split), everything(whole)
    assert [s.token.id for s in got["steps"]] == [s.token.id for s in want["steps"]]
    assert_same(want, got)
    assert_same(runs(whole), runs(split))
