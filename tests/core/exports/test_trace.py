"""The JSON trace (``core/exports/trace.py``): every field read back from the run's own records,
the logit lens's last layer the model's own choice, and the JSON written whole."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from llm_lens.core.exports.trace import (
    MODEL_FIELDS,
    SCHEMA,
    emit_json,
    run_dict,
    trace_dict,
    write_json,
)


def test_run_dict_is_the_runs_records(tiny_run):
    engine, run = tiny_run
    data = run_dict(engine, run)
    assert data["schema"] == SCHEMA == "llm-lens-trace/1"
    one_device = {"placement": [], "quantization": "", "residual_note": ""}  # one stream too
    assert data["model"] == {k: getattr(engine.info, k) for k in MODEL_FIELDS} | one_device
    assert data["sampling"]["greedy"] is True and data["sampling"]["temperature"] == 0
    assert data["prompt"]["token_ids"] == list(run.prompt.ids) and data["prompt"]["chat"] is False
    assert "".join(data["prompt"]["tokens"]) == run.prompt.text
    assert data["output_text"] == run.output_text() and data["finish_reason"] == "length"
    assert data["timing"]["ttft_ms"] == run.steps[0].timing.total_ms
    total_s = sum(s.timing.total_ms for s in run.steps) / 1e3
    assert data["timing"]["tokens_per_s"] == pytest.approx(4 / total_s)
    for got, step in zip(data["steps"], run.steps, strict=True):
        assert (got["index"], got["token_id"], got["rank"]) == (step.index, step.token.id, 0)
        assert got["token_bytes"] == step.token.raw.hex() and got["prob"] == step.prob
        assert [t["id"] for t in got["top"]] == step.top_ids.tolist()
        assert [t["prob"] for t in got["top"]] == step.top_probs.tolist()
        assert got["kv_cache_bytes"] == step.kv.bytes_total
        assert [s["name"] for s in got["stages"]] == [s.name for s in step.stages]
        lens = got["logit_lens"]
        assert [row["layer"] for row in lens] == list(range(engine.info.num_layers + 1))
        # the last layer's lens is the model's own output: the greedy token, its probability
        assert lens[-1]["top_id"] == step.token.id
        assert lens[-1]["prob"] == pytest.approx(step.prob, rel=1e-4)
        assert all(0 < row["prob"] <= 1 for row in lens)


def test_trace_dict_from_records_alone_and_without_a_lens(tiny_run):
    engine, run = tiny_run
    params = {"temperature": 0.7, "top_k": 5, "seed": 3}
    data = trace_dict(engine.info.as_dict(), run.prompt, params, run.steps[:2], [None, None], None)
    assert [s["logit_lens"] for s in data["steps"]] == [[], []]
    assert data["sampling"]["greedy"] is False and data["sampling"]["top_p"] is None
    assert data["finish_reason"] == "running"  # an unfinished run
    assert data["timing"]["mean_itl_ms"] == run.steps[1].timing.total_ms
    with pytest.raises(ValueError):  # a lens per step, or none: never silently misaligned
        trace_dict(engine.info.as_dict(), run.prompt, params, run.steps, [None], None)


def test_json_goes_to_the_file_whole_or_to_stdout(tiny_run, tmp_path, capsys):
    engine, run = tiny_run
    data = run_dict(engine, run)
    want = json.loads(json.dumps(data))  # tuples become lists, nothing else changes
    out = tmp_path / "trace.json"
    out.write_text("old")
    emit_json(data, str(out))
    assert json.loads(out.read_text(encoding="utf-8")) == want
    assert os.listdir(tmp_path) == ["trace.json"]  # no temporary file left beside it
    emit_json(data, None)
    assert json.loads(capsys.readouterr().out) == want
    emit_json({"text": "Jérôme ✓"}, "-")
    assert "Jérôme ✓" in capsys.readouterr().out  # not escaped to \\u
    write_json({"a": np.float32(0.5).item()}, tmp_path / "a.json")
    assert json.loads((tmp_path / "a.json").read_text()) == {"a": 0.5}


def test_the_trace_names_its_engine(tiny_run):
    """The transformers Engine and its ModelEngine adapter write the same steps and lens, and
    the trace says which engine made the run (the adapter also what it provides)."""
    from llm_lens.core.engines.local import LocalEngine

    engine, run = tiny_run
    plain, adapted = run_dict(engine, run), run_dict(LocalEngine(engine), run)
    assert plain["engine"] == {"name": "local", "model": engine.info.name, "url": None}
    assert adapted["engine"]["name"] == "local" and adapted["engine"]["url"] is None
    assert adapted["engine"]["provides"]["top_n"] == -1
    assert adapted["steps"] == plain["steps"] and "stop_error" not in adapted
    assert all(step["approximate"] is False for step in plain["steps"])
