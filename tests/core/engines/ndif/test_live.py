"""An NDIF model as a model thread drives it (core/engines/ndif/live.py): the spec's one-line
checks, the live run's items (equal to the local engine's run, through remote="local"), and what
a reopened session's recorded identity provides (equal to what the engine provided)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from llm_lens.core.engines.ndif import NdifEngine
from llm_lens.core.engines.ndif.engine import MISSING
from llm_lens.core.engines.ndif.live import NdifSpec, ndif_live, recorded_provides
from llm_lens.core.engines.ndif.status import NO_KEY
from llm_lens.core.errors import LensError
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.runs.history import RunStore
from llm_lens.core.runs.workbench import RunRequest
from llm_lens.core.sampling import GREEDY
from tests.families import family_model

PROMPT = "Explain transformers like I am 12"  # the conftest's greedy_run


def request(run_id: int = 7, **more) -> RunRequest:
    return RunRequest(run_id, PROMPT, True, GREEDY, RunConfig(max_new_tokens=8), **more)


def test_the_live_items_are_the_local_engine_s_run(loaded, greedy_run):
    engine = NdifEngine.local(loaded)
    heard: list[str] = []
    engine.on_status = lambda s: heard.append(s.state)  # what the window's status line hears
    store = RunStore()
    heads = ((3, 1), (20, 5))  # opened in the Attention pane: their rows come back
    items = list(ndif_live(engine, request(heads=heads), threading.Event(), store))
    tags = [tag for tag, _ in items]
    assert tags == ["run_started"] + ["step"] * len(greedy_run.steps) + ["run_finished"]
    assert items[0][1].ids == greedy_run.prompt.ids
    assert [p.token.id for t, p in items if t == "step"] == greedy_run.generated_ids
    assert items[-1][1].finish_reason == greedy_run.finish_reason
    assert store.runs[7].run_id == 7 and store.runs[7].steps[0].run_id == 7
    assert heard == ["RECEIVED", "RUNNING", "COMPLETED"]
    assert store.runs[7].spec.heads == heads and store.runs[7].engine_record()["capture"][
        "heads"] == [[3, 1], [20, 5]]  # fmt: skip
    for step, local in zip(store.runs[7].steps, greedy_run.steps, strict=True):
        for layer, head in heads:
            assert step.attention[layer, head] == pytest.approx(
                local.attention[layer, head], rel=1e-4, abs=1e-6
            )
    assert engine.info.device == f"NDIF (local simulation on {loaded.info.device})"


def test_interventions_and_a_cancel_before_the_job(loaded):
    engine = NdifEngine.local(loaded)
    with pytest.raises(LensError, match=MISSING["interventions"]):
        list(ndif_live(engine, request(interventions=(object(),)), threading.Event()))
    cancel = threading.Event()
    cancel.set()  # before the job is sent: none is
    items = list(ndif_live(engine, request(), cancel))
    assert [t for t, _ in items] == ["run_started", "run_finished"]
    assert items[-1][1].finish_reason == "cancelled"


@pytest.mark.parametrize("family", ["qwen2", "mixtral"])
def test_a_reopened_session_provides_what_the_engine_did(tokenizer, family):
    engine = NdifEngine.local(family_model(family, tokenizer))
    for full in (False, True):
        engine.spec = replace(engine.spec, full_logits=full)
        recorded = recorded_provides(engine.identity.as_dict())  # as a session stores it
        assert recorded == engine.provides and recorded.head_rows  # opened heads' rows
    assert engine.provides.has("routing") == (family == "mixtral")
    assert recorded_provides({"name": "openai", "model": "m", "url": None}) is None


def test_the_spec_s_mistakes_are_one_line(tmp_path, monkeypatch):
    for bad in ("", "name-only", "a/b/c", str(tmp_path)):
        with pytest.raises(LensError, match="Hub id") as said:
            NdifSpec(bad or None).check()
        assert "\n" not in str(said.value)
    with pytest.raises(LensError, match="no model folder"):
        NdifSpec(str(tmp_path / "absent"), local=True).check()
    NdifSpec(str(tmp_path), local=True).check()  # a folder runs here
    NdifSpec(None, local=True).check()  # the bundled model
    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    with pytest.raises(LensError) as said:
        NdifSpec("meta-llama/Llama-3.1-8B").open()  # no key: nothing is fetched
    assert str(said.value) == NO_KEY
    assert NdifSpec(None, local=True).base_url == "NDIF (local simulation)"


def test_no_nnsight_is_one_line(monkeypatch):
    from llm_lens.core.engines.ndif import live

    monkeypatch.setattr(live, "find_spec", lambda name: None)
    with pytest.raises(LensError, match="needs nnsight"):
        NdifSpec(None, local=True).open()
