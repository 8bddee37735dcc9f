"""Every JSON file LLM Lens writes is strict JSON (RFC 8259): no bare NaN or Infinity, a
non-finite number written as null with its reason beside it, or the save refused."""

from __future__ import annotations

import json
import math
import zipfile
from dataclasses import replace

import pytest

from llm_lens.core.cli import main
from llm_lens.core.fileio import finite_json, first_not_finite, strict_json


def strict_loads(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as jq and JSON.parse do."""

    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_the_strict_parser_refuses_nan():
    with pytest.raises(ValueError, match="NaN"):
        strict_loads(json.dumps({"p": math.nan}))


def test_non_finite_numbers_become_null_with_the_reason_beside():
    data = {"prob": math.nan, "top": [1.0, math.inf, -math.inf], "ok": 2.5, "rows": [{"x": 1e999}]}
    back = strict_loads(strict_json(data))
    assert back["prob"] is None and back["prob_not_finite"] == "NaN"
    assert back["top"] == [1.0, None, None]
    assert back["top_not_finite"] == [[1, "Infinity"], [2, "-Infinity"]]
    assert back["ok"] == 2.5 and "ok_not_finite" not in back
    assert back["rows"] == [{"x": None, "x_not_finite": "Infinity"}]
    assert finite_json({"a": [1, 2]}) == {"a": [1, 2]}  # nothing added where all is finite


def test_first_not_finite_names_the_path():
    assert first_not_finite({"runs": [{"steps": [{"p": 1.0}, {"p": math.nan}]}]}) == (
        "runs/0/steps/1/p (NaN)"
    )
    assert first_not_finite({"a": [1.0, 2]}) is None


def test_every_file_the_cli_writes_is_strict_json(tiny_folder, tmp_path, capsys):
    model = ["--model", str(tiny_folder), "--quiet", "--max-new-tokens", "3"]
    trace, session, compared = tmp_path / "t.json", tmp_path / "s.llmlens", tmp_path / "c.json"
    assert main(["trace", "hi", *model, "--out", str(trace), "--session", str(session)]) == 0
    assert main(["trace", "hi", *model, "--greedy", "--out", "-"]) == 0
    stdout_trace = capsys.readouterr().out
    configs = ["--config", "greedy", "--config", "temperature=0.9,seed=2"]
    assert main(["compare", "hi", *model, *configs, "--out", str(compared)]) == 0
    explain = ["explain", "hi", *model, "--greedy", "--step", "0", "--json"]
    assert main([*explain, "--out", str(tmp_path / "e.json")]) == 0
    assert main(["kv", "--config", str(tiny_folder), "--json"]) == 0
    kv_report = capsys.readouterr().out
    with zipfile.ZipFile(session) as z:
        manifest = z.read("manifest.json").decode("ascii")
    texts = [trace.read_text(), stdout_trace, compared.read_text(), manifest, kv_report]
    texts.append((tmp_path / "e.json").read_text())
    parsed = [strict_loads(t) for t in texts]
    assert parsed[0]["schema"] == "llm-lens-trace/1" and len(parsed[0]["steps"]) == 3
    assert parsed[1]["sampling"]["greedy"] is True


def test_a_trace_with_nan_is_written_as_null_with_the_reason(tiny_engine, tmp_path):
    from llm_lens.core.exports.trace import emit_json, run_dict
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY

    run = tiny_engine.start(tiny_engine.tokenize("hi"), GREEDY, RunConfig(max_new_tokens=2))
    run.run_all()
    run.steps[1] = replace(run.steps[1], entropy=math.nan, prob=math.inf)
    out = tmp_path / "nan.json"
    emit_json(run_dict(tiny_engine, run), str(out))
    step = strict_loads(out.read_text())["steps"][1]
    assert step["entropy"] is None and step["entropy_not_finite"] == "NaN"
    assert step["prob"] is None and step["prob_not_finite"] == "Infinity"


def test_a_session_with_nan_is_refused_in_one_line(tiny_engine, tmp_path):
    from llm_lens.core.cli.inspect import write_trace_session
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY
    from llm_lens.core.sessions.format import SessionError

    run = tiny_engine.start(tiny_engine.tokenize("hi"), GREEDY, RunConfig(max_new_tokens=2))
    run.run_all()
    run.steps[1] = replace(run.steps[1], entropy=math.nan)
    path = tmp_path / "nan.llmlens"
    with pytest.raises(SessionError) as caught:
        write_trace_session(run, tiny_engine.info, path)
    message = str(caught.value)
    assert "runs/0/steps/1/entropy (NaN)" in message and "\n" not in message
    assert not path.exists()
