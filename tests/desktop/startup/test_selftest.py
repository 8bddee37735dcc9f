"""``llm-lens FILE --selftest`` checks FILE: a session file's run goes through every pane, a bad
one fails with one line; a model folder given there is loaded as ``--model`` would be."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROMPT = "Explain transformers like I am 12"


def _selftest(tmp_path, *args, timeout=240):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", LLM_LENS_CONFIG_DIR=str(tmp_path / "cfg"))
    env["LLM_LENS_LOG_DIR"] = str(tmp_path / "logs")
    cmd = [sys.executable, "-m", "llm_lens.desktop", *args, "--selftest"]
    result = subprocess.run(cmd, capture_output=True, env=env, timeout=timeout)
    err = result.stderr.decode("utf-8", "replace")
    lines = [line for line in err.splitlines() if "propagateSizeHints" not in line]
    return result.returncode, lines


@pytest.fixture(scope="module")
def good_session(tmp_path_factory, engine):
    """A one-run session of 4 greedy tokens on the bundled model, written by core."""
    from llm_lens.core.cli.inspect import write_trace_session
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY

    run = engine.start(engine.tokenize(PROMPT), GREEDY, RunConfig(max_new_tokens=4))
    for _ in run:
        pass
    path = tmp_path_factory.mktemp("session") / "good.llmlens"
    write_trace_session(run, engine.info, path)
    return path, run.output_text()


@pytest.mark.slow
def test_a_good_session_file_is_shown_and_checked(tmp_path, good_session):
    path, text = good_session
    code, lines = _selftest(tmp_path, str(path), "--window-size", "1366x768")
    assert code == 0, lines
    assert f"selftest: read {path} (1 runs)" in lines
    assert f"selftest: showing the session's run {text!r}" in "\n".join(lines)
    assert not any(line.startswith("selftest: generated") for line in lines)  # no fresh run
    assert lines[-1] == "selftest: ok"


def _truncated(tmp_path, good):
    bad = tmp_path / "truncated.llmlens"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    return bad


def _fifo(tmp_path, _good):
    fifo = tmp_path / "pipe.llmlens"
    os.mkfifo(fifo)  # reading it would block for ever
    return fifo


def _bad_manifest(tmp_path, _good):
    import zipfile

    bad = tmp_path / "manifest.llmlens"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("manifest.json", json.dumps({"format": "llm-lens-session/9", "runs": "x"}))
    return bad


@pytest.mark.parametrize("make", [_truncated, _fifo, _bad_manifest])
def test_a_hostile_session_file_fails_with_one_line(tmp_path, good_session, make):
    bad = make(tmp_path, good_session[0])
    code, lines = _selftest(tmp_path, str(bad), timeout=120)
    assert code == 1, lines
    failed = [line for line in lines if line.startswith("selftest: FAILED")]
    assert len(failed) == 1 and failed[0].startswith(
        f"selftest: FAILED: cannot open the session file {bad}: "
    )
    assert not any("Traceback" in line or line.startswith("selftest: loaded") for line in lines)
    assert not any("selftest: ok" in line for line in lines)


def test_a_model_folder_given_as_file_is_loaded_as_the_model(tmp_path):
    """The positional FILE is not ignored: a folder whose config names custom code is refused."""
    folder = tmp_path / "custom"
    folder.mkdir()
    config = {"model_type": "llama", "auto_map": {"AutoConfig": "custom.Config"}}
    (folder / "config.json").write_text(json.dumps(config))
    code, lines = _selftest(tmp_path, str(folder), timeout=180)
    assert code == 1, lines
    assert any("needs custom code" in line for line in lines), lines
