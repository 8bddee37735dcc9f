"""8-bit and 4-bit weights through transformers' quanto integration on this CPU: a tiny model
loads, runs every analysis, its logits are its own quantized forward's, and every record says
the numbers are the quantized model's."""

from __future__ import annotations

import json

import pytest

from llm_lens.core.errors import ModelLoadError
from llm_lens.core.placement import Placement
from llm_lens.core.quantize import quantization_config
from tests.families import family_model

pytest.importorskip("optimum.quanto")


@pytest.fixture(scope="module")
def folder(tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen2")
    family_model("qwen2", tokenizer).model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_a_quantized_model_loads_runs_and_is_marked(folder, kind, tmp_path):
    import torch

    from llm_lens.core.cli import main
    from llm_lens.core.loading import load_model
    from llm_lens.core.loop.engine import Engine, RunConfig
    from llm_lens.core.sampling import GREEDY
    from tests.core.test_placement_fidelity import everything

    loaded = load_model(str(folder), device="cpu", placement=Placement(quantize=kind))
    assert loaded.info.quantization == (
        f"{kind} weights (quanto): the numbers of this model as quantized"
    )
    proj = loaded.model.model.layers[0].self_attn.q_proj
    assert type(proj).__name__ == "QLinear"  # the weights really are quantized
    engine = Engine(loaded)
    out = everything(engine, tokens=2)
    assert not any(isinstance(v, str) for v in out.values())  # every analysis ran
    out["run"] = engine.start(engine.tokenize("Hi"), GREEDY, RunConfig(max_new_tokens=2))
    out["run"].run_all()
    step = out["steps"][0]
    with torch.no_grad():  # the recorded logits are the quantized model's own forward
        own = loaded.model(torch.tensor([list(step.context_ids)])).logits[0, -1]
    assert torch.allclose(torch.from_numpy(step.logits.copy()), own.float(), atol=1e-5)
    note = loaded.info.quantization
    assert_saved_files_say(engine, out["run"], note, tmp_path)
    trace = tmp_path / "t.json"
    args = ["trace", "hi", "--model", str(folder), "--quantize", kind, "--greedy"]
    assert main([*args, "--max-new-tokens", "2", "--out", str(trace), "--quiet"]) == 0
    assert json.loads(trace.read_text())["model"]["quantization"].startswith(f"{kind} weights")


def test_a_choice_the_device_cannot_run_is_one_line():
    with pytest.raises(ModelLoadError, match="needs a CUDA GPU and bitsandbytes"):
        quantization_config("nf4", "cpu")
    assert type(quantization_config("int8", "cpu")).__name__ == "QuantoConfig"


def assert_saved_files_say(engine, run, note, folder):
    """The session file and the HTML report of a quantized model's run carry the note."""
    from llm_lens.core.exports.report import html_report
    from llm_lens.core.records import RunSummary
    from llm_lens.core.sessions.format import Session, session_from_run
    from llm_lens.core.sessions.read import load_session
    from llm_lens.core.sessions.write import save_session

    path = folder / "q.llmlens"
    save_session(path, Session(engine.info.as_dict(), (session_from_run(run, engine.info),)))
    assert load_session(path).model["quantization"] == note
    summary = RunSummary.of(run.run_id, run.prompt, run.steps, run.finish_reason)
    assert note in html_report(engine.info.as_dict(), run.prompt, run.steps, summary)


def test_quantized_weights_offloaded_to_disk_are_refused_in_one_line(folder):
    from llm_lens.core.loading import load_model
    from llm_lens.core.placement import parse_placement

    place = parse_placement(max_memory="cpu=1KiB", quantize="int8")
    with pytest.raises(ModelLoadError, match="cannot be offloaded to the CPU or disk") as info:
        load_model(str(folder), device="cpu", placement=place)
    assert "\n" not in str(info.value)
