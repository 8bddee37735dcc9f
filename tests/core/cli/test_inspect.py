"""``llm-lens inspect`` and the trace command's session: a summary, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_lens.core.cli.inspect import main as main_inspect
from llm_lens.core.cli.inspect import write_trace_session
from llm_lens.core.sessions.format import PARTS
from llm_lens.core.sessions.read import load_session

ROOT = Path(__file__).resolve().parents[3]


def test_write_trace_session(tmp_path, greedy_run, engine):
    path = tmp_path / "trace.llmlens"
    assert write_trace_session(greedy_run, engine.info, path) == path.stat().st_size
    run = load_session(path).runs[0]
    t = len(greedy_run.prompt)
    assert run.prompt_attention.shape == (30, 9, t, t) and len(run.steps) == 8


def test_inspect_prints_a_summary(saved, greedy_run, engine, capsys):
    assert main_inspect([str(saved)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    needles = [
        "SmolLM2-135M-Instruct",
        engine.info.weights_id,
        "8 steps",
        "finish length",
        greedy_run.output_text(),
        greedy_run.prompt.text,
        "on disk",
        "greedy",
        *(f"{part} " for part in PARTS),
    ]
    for needle in needles:
        assert needle in out, needle


@pytest.mark.parametrize("argv", [["random"], ["missing.llmlens"], []])
def test_inspect_a_bad_file_is_one_line_and_status_2(tmp_path, capsys, argv):
    if argv == ["random"]:
        argv = [str(tmp_path / "random.llmlens")]
        Path(argv[0]).write_bytes(b"\x00garbage" * 50)
    assert main_inspect(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("llm-lens inspect: error: ")
