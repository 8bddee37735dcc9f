"""The one top-level guard: a bug is one line naming what was being done and a log file with the
traceback; a user mistake is one line and no log; Ctrl+C is exit 130."""

from __future__ import annotations

import pytest

from llm_lens.core.cli.args import doing, guarded
from llm_lens.core.errors import LensError


@pytest.fixture
def logs(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_LENS_LOG_DIR", str(tmp_path / "logs"))
    return tmp_path / "logs"


def _bug() -> int:
    doing("computing the thing on model X")
    raise ZeroDivisionError("deep inside\nsecond line")


def test_a_bug_is_one_line_and_a_log_with_the_traceback(logs, capsys):
    assert guarded("trace", _bug) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    line = err[0]
    assert line.startswith("llm-lens trace: unexpected error while computing the thing on model X")
    assert "ZeroDivisionError: deep inside" in line and "second line" not in line
    (log,) = logs.iterdir()
    assert str(log) in line
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "in _bug" in text
    assert "while: computing the thing on model X" in text


def test_a_user_mistake_writes_no_log(logs, capsys):
    def mistake() -> int:
        raise LensError("the prompt is empty")

    assert guarded("trace", mistake) == 2
    assert capsys.readouterr().err == "llm-lens trace: error: the prompt is empty\n"
    assert not logs.exists()


def test_ctrl_c_is_exit_130_one_line(logs, capsys):
    def interrupted() -> int:
        raise KeyboardInterrupt

    assert guarded("compare", interrupted) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["llm-lens compare: interrupted (Ctrl+C); stopped, nothing was written"]


def test_running_out_of_memory_is_one_line(logs, capsys):
    def big() -> int:
        raise MemoryError

    assert guarded("kv", big) == 2
    assert "ran out of memory" in capsys.readouterr().err


def test_an_unwritable_log_folder_still_gives_the_line(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("LLM_LENS_LOG_DIR", str(blocker / "sub"))
    assert guarded("trace", _bug) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "no log could be written" in line
