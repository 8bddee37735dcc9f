"""The crash-recovery offer: only the autosave of this process's own previous run, whose
lock its holder left behind when it died; another live LLM Lens's autosave is not offered."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llm_lens.desktop.window import session_actions
from llm_lens.desktop.window.session_actions import SessionActions, process_alive


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setattr(session_actions, "_lock_path", lambda: tmp_path / "session.lock")
    (tmp_path / "autosave.llmlens").write_bytes(b"runs")
    return tmp_path


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _start(folder) -> str | None:
    # start/stop read no attribute of the window: run them unbound on a bare object
    return SessionActions.start(object())  # type: ignore[arg-type]


def test_another_live_processs_autosave_is_not_offered_nor_its_lock_taken(folder):
    other = os.getppid()  # alive: the process that started this test
    assert process_alive(other)
    (folder / "session.lock").write_text(str(other))
    assert _start(folder) is None
    assert (folder / "session.lock").read_text() == str(other)
    SessionActions.stop(object())  # type: ignore[arg-type]
    assert (folder / "session.lock").exists() and (folder / "autosave.llmlens").exists()


def test_a_crashed_processs_autosave_is_offered(folder):
    dead = _dead_pid()
    assert not process_alive(dead)
    (folder / "session.lock").write_text(str(dead))
    assert _start(folder) == str(folder / "autosave.llmlens")
    assert (folder / "session.lock").read_text() == str(os.getpid())
    SessionActions.stop(object())  # type: ignore[arg-type]
    assert not (folder / "session.lock").exists()
    assert not (folder / "autosave.llmlens").exists()


def test_no_lock_means_a_clean_exit_and_no_offer(folder):
    assert _start(folder) is None
    assert (folder / "session.lock").read_text() == str(os.getpid())
