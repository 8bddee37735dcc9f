"""Where ``--out`` may point: a file (replaced atomically), ``-`` (stdout), /dev/null, a FIFO
someone reads or a terminal (written into, never replaced); never a device or a file the user
did not mean, and never the session the same command writes."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from llm_lens.core.cli import main
from llm_lens.core.errors import LensError
from llm_lens.core.exports.trace import write_json
from llm_lens.core.fileio import PathError, output_target, stream_output, write_target


def _trace(folder, *out):
    return main(["trace", "hi", "--model", str(folder), "--quiet", "--max-new-tokens", "2", *out])


def test_trace_to_dev_null_exits_0(tiny_folder, capsys):
    assert _trace(tiny_folder, "--out", os.devnull) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert Path(os.devnull).is_char_device()  # written into, not replaced by a file


def test_trace_to_dash_is_stdout(tiny_folder, capsys):
    assert _trace(tiny_folder, "--out", "-") == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "llm-lens-trace/1"


def test_a_fifo_someone_reads_gets_the_json(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    deadline = time.monotonic() + 5
    while True:  # the reader's open() must come first, or the write refuses (below)
        try:
            write_json({"a": 1}, fifo)
            break
        except PathError:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    reader.join(5)
    assert json.loads(got[0]) == {"a": 1} and fifo.is_fifo()


def test_a_fifo_no_one_reads_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(PathError, match="no one is reading"):
        write_json({"a": 1}, fifo)
    assert time.monotonic() - start < 2 and fifo.is_fifo()


def test_a_link_to_dev_null_is_written_into(tmp_path):
    link = tmp_path / "null-link"
    link.symlink_to(os.devnull)
    write_json({"a": 1}, link)
    assert link.is_symlink() and Path(os.readlink(link)) == Path(os.devnull)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_other_devices_are_refused():
    assert stream_output("/dev/zero") is None
    with pytest.raises(PathError, match="not a regular file"):
        output_target("/dev/zero")


def test_a_session_never_goes_to_a_device():
    with pytest.raises(PathError, match="not a regular file"):
        write_target(os.devnull)


def test_a_regular_file_is_still_replaced_atomically(tmp_path):
    out = tmp_path / "t.json"
    out.write_text("old")
    write_json({"b": 2}, out)
    assert json.loads(out.read_text()) == {"b": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_out_and_session_naming_one_file_are_refused(tmp_path, capsys):
    same = tmp_path / "both.llmlens"
    code = main(["trace", "hi", "--out", str(same), "--session", str(same), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "name the same file" in err[0]
    assert not same.exists()
    with pytest.raises(LensError):
        from llm_lens.core.cli.trace import check_inputs, trace_parser

        args = trace_parser().parse_args(["hi", "--out", str(same)])
        check_inputs(args, str(tmp_path / "." / "both.llmlens"))


@pytest.mark.parametrize("command", ["trace", "compare"])
def test_out_to_a_fifo_no_one_reads_is_one_line_exit_2(tiny_folder, tmp_path, capsys, command):
    """(Was refused before the model loaded, as "not a regular file"; a FIFO is an output now,
    so only one without a reader is refused, when the result is written.)"""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    configs = ["--config", "greedy", "--config", "wild"] if command == "compare" else []
    args = [command, "hi", *configs, "--model", str(tiny_folder), "--quiet"]
    code = main([*args, "--max-new-tokens", "2", "--out", str(fifo)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "FIFO that no one is reading" in err[0]
    assert fifo.is_fifo()
