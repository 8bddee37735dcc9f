"""A real llama.cpp server (llama-cpp-python's) on 127.0.0.1, serving the bundled GGUF, started
once for the tests that need it. `make setup` builds llama-cpp-python[server] (the
`server-tests` extra); where it does not import, those tests skip, saying why."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .llama_server import llama_cpp_server


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """The API root (http://127.0.0.1:PORT/v1) of a llama.cpp server on the bundled GGUF."""
    check = [sys.executable, "-c", "import llama_cpp.server.app"]  # not loaded in this process
    found = subprocess.run(check, capture_output=True, text=True)
    if found.returncode != 0:
        last = (found.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"llama-cpp-python[server] does not import ({last}); `make setup` builds it")
    with llama_cpp_server(tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield url
