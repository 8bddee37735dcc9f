"""core/guards/load.py: several first launches converting one GGUF into one cache, and a
conversion killed half-way, never leave a broken or half-written model in the cache."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from llm_lens.core import loading
from llm_lens.core.guards.load import clean_stale_conversions, publish


def _fake_convert(barrier: threading.Barrier | None, calls: list[str]):
    def convert(gguf: Path, out: Path, report) -> None:
        calls.append(out.name)
        if barrier is not None:
            barrier.wait(timeout=20)  # every launch is mid-conversion at once
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"weights of " + out.name.encode())

    return convert


def test_concurrent_first_launches_share_one_cache(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("LLM_LENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("llm_lens.core.guards.gguf.check_gguf", lambda *a: None)
    calls: list[str] = []
    monkeypatch.setattr(loading, "_convert", _fake_convert(threading.Barrier(4), calls))
    results, errors = [], []

    def launch() -> None:
        try:
            results.append(loading.gguf_to_folder(gguf, lambda *_: None))
        except Exception as exc:  # noqa: BLE001 - any failure is the finding
            errors.append(exc)

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(calls) == 4 and len(set(results)) == 1
    target = results[0]
    assert (target / "config.json").is_file() and (target / "model.safetensors").is_file()
    assert not list(target.parent.glob(".convert-*"))  # the losers' copies are gone


def test_an_incomplete_target_is_replaced_and_a_complete_one_kept(tmp_path):
    def complete(p: Path) -> bool:
        return (p / "model.safetensors").is_file()

    target = tmp_path / "model"
    target.mkdir()
    (target / "config.json").write_text("{}")  # a folder no conversion of ours finished
    tmp = tmp_path / ".convert-1"
    tmp.mkdir()
    (tmp / "model.safetensors").write_bytes(b"new")
    publish(tmp, target, complete)
    assert (target / "model.safetensors").read_bytes() == b"new" and not tmp.exists()
    other = tmp_path / ".convert-2"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"late")
    publish(other, target, complete)  # the one published first stays
    assert (target / "model.safetensors").read_bytes() == b"new" and not other.exists()


KILLED = """
import sys, time
from pathlib import Path
from llm_lens.core import loading
import llm_lens.core.guards.gguf as g
g.check_gguf = lambda *a: None
def slow(gguf, out, report):
    (out / "config.json").write_text("{}")
    print("converting", flush=True)
    time.sleep(60)
loading._convert = slow
loading.gguf_to_folder(Path(sys.argv[1]), lambda *_: None)
"""


def test_a_conversion_killed_half_way_leaves_no_model(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    env = dict(os.environ, LLM_LENS_CACHE=str(tmp_path / "cache"))
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(gguf)], stdout=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"converting"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    models = tmp_path / "cache" / "models"
    left = list(models.glob(".convert-*"))
    assert len(left) == 1 and not [p for p in models.iterdir() if not p.name.startswith(".")]
    old = time.time() - 7 * 3600
    os.utime(left[0], (old, old))
    monkeypatch.setenv("LLM_LENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("llm_lens.core.guards.gguf.check_gguf", lambda *a: None)
    monkeypatch.setattr(loading, "_convert", _fake_convert(None, []))
    target = loading.gguf_to_folder(gguf, lambda *_: None)  # the next launch converts afresh
    assert (target / "model.safetensors").is_file()
    assert not left[0].exists()  # the killed launch's folder, hours old, is cleaned


def test_stale_conversions_are_kept_while_young(tmp_path):
    young = tmp_path / ".convert-young"
    young.mkdir()
    clean_stale_conversions(tmp_path)
    assert young.exists()
