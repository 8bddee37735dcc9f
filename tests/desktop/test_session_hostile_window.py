"""Hostile session files opened through the window's Open path: one clear line shown inline,
no traceback, no crash, no hang, and the window still opens a good file afterwards (the core
side of the catalogue is tests/core/test_session_hostile.py)."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY
from llm_lens.core.sessions.format import Session
from llm_lens.core.sessions.views import recorded_run
from llm_lens.core.sessions.write import save_session


@pytest.fixture(scope="module")
def good(tmp_path_factory, tiny_engine) -> Path:
    run = tiny_engine.start(tiny_engine.tokenize("Once upon a time", chat=False), GREEDY,
                            RunConfig(max_new_tokens=3))  # fmt: skip
    run.run_all()
    path = tmp_path_factory.mktemp("hostile_window") / "good.llmlens"
    save_session(path, Session(tiny_engine.info.as_dict(), (recorded_run(run),)))
    return path


def _absurd_header(good: Path, dst: Path) -> None:
    """The good file with one array claiming 10⁹ × 10⁹ float64s."""
    with zipfile.ZipFile(good) as z:
        members = {n: z.read(n) for n in z.namelist()}
    manifest: dict[str, Any] = json.loads(members["manifest.json"])
    name = next(iter(manifest["arrays"]))
    manifest["arrays"][name].update(dtype="float64", shape=[10**9, 10**9])
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(dst, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


def _bad_npy(good: Path, dst: Path) -> None:
    """A pickled object array where the manifest expects numbers."""
    with zipfile.ZipFile(good) as z:
        members = {n: z.read(n) for n in z.namelist()}
    name = next(n for n in members if n.endswith("tail_lse.npy"))
    out = io.BytesIO()
    np.save(out, np.array([object()], dtype=object), allow_pickle=True)
    members[name] = out.getvalue()
    with zipfile.ZipFile(dst, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


CASES = {
    "truncated": (lambda g, p: p.write_bytes(g.read_bytes()[: len(g.read_bytes()) // 2]),
                  "truncated or damaged"),
    "random bytes": (lambda g, p: p.write_bytes(np.random.default_rng(0).bytes(4096)),
                     "not a zip file"),
    "absurd header": (_absurd_header, "too large"),
    "pickled array": (_bad_npy, "array runs/0/tail_lse.npy"),
    "fifo": (lambda g, p: os.mkfifo(p), "not a regular file"),
    "symlink to a device": (lambda g, p: p.symlink_to("/dev/zero"), "not a regular file"),
}  # fmt: skip


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("LLM_LENS_LOG_DIR", str(tmp_path / "logs"))
    from llm_lens.desktop.window.main_window import MainWindow

    win = MainWindow()
    win.sessions.confirm_close = False
    qtbot.addWidget(win)
    yield win
    win.close()


def test_hostile_files_are_one_line_each_and_the_window_goes_on(
    qtbot, window, tmp_path, good, capsys
):
    ctl = window.controller
    for name, (make, expected) in CASES.items():
        path = tmp_path / f"{name.replace(' ', '_')}.llmlens"
        make(good, path)
        errors: list[str] = []
        ctl.sig_error.connect(errors.append)
        with qtbot.waitSignal(ctl.sig_error, timeout=30_000):
            window.sessions.open(str(path))
        qtbot.wait(50)  # anything else queued by the open would arrive now
        ctl.sig_error.disconnect(errors.append)
        assert len(errors) == 1, (name, errors)
        (message,) = errors
        assert expected in message and "\n" not in message, (name, message)
        assert "Traceback" not in message and str(path) in message, name
        assert (
            window.prompt_panel.error.text() == message or not window.prompt_panel.error.isHidden()
        )
        assert ctl.recorded is None and not ctl.steps, name
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # the window is still usable: the good file opens and shows its run
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        window.sessions.open(str(good))
    assert ctl.recorded is not None and len(ctl.steps) == 3
    assert ctl._thread.isRunning()
