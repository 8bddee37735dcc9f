"""The OpenAI engine's per-token overhead over the server's own stream (target ≤ 1.10×).

Starts llama.cpp's server (llama-cpp-python's) on the bundled GGUF, then times the same greedy
request (32 tokens, 20 alternatives a step) two ways, in paired rounds whose order alternates:
the bare stream (the reply's bytes read to ``[DONE]`` with http.client, nothing parsed) and the
engine's run (every chunk parsed, every token made a StepRecord). Prints each one's median
milliseconds per token, the median ratio of the pairs, the engine's own parsing time per token
and the load average. Skips, saying so, where llama-cpp-python[server] is not installed.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llm_lens.core.engines.openai import Endpoint, OpenAIEngine  # noqa: E402
from llm_lens.core.loop.engine import RunConfig  # noqa: E402
from llm_lens.core.sampling import GREEDY  # noqa: E402

TOKENS = 32
ROUNDS = 8
PROMPT = "Explain transformers like I am 12"


def bare_stream(url: str, path: str, body: dict) -> tuple[float, int]:
    """Seconds from the request to ``[DONE]``, reading the raw bytes; and the data lines read."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    t0 = time.perf_counter()
    conn.request(
        "POST", f"{parts.path}/{path}", json.dumps(body), {"Content-Type": "application/json"}
    )
    response = conn.getresponse()
    events = 0
    while line := response.readline():
        events += line.startswith(b"data:")
        if line.startswith(b"data: [DONE]"):
            break
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed, events


def main() -> None:
    check = [sys.executable, "-c", "import llama_cpp.server.app"]
    if subprocess.run(check, capture_output=True).returncode != 0:
        print("skipped: llama-cpp-python[server] is not installed (make setup builds it)")
        return
    from tests.core.engines.openai.llama_server import llama_cpp_server

    log = Path(tempfile.mkdtemp()) / "server.log"
    with llama_cpp_server(log) as url:
        engine = OpenAIEngine(Endpoint(url), None, top_logprobs=20)
        prompt = engine.tokenize(PROMPT, chat=True)
        config = RunConfig(max_new_tokens=TOKENS)
        warm = engine.start(prompt, GREEDY, config)
        warm.run_all()  # the server's prompt cache warmed; the request body to replay
        path = "chat/completions"
        bare, ours, parse = [], [], []
        for n in range(ROUNDS):  # paired rounds, the order alternating, so drift cancels
            for which in ("bare", "ours") if n % 2 == 0 else ("ours", "bare"):
                if which == "bare":
                    seconds, _events = bare_stream(url, path, warm.sent)
                    bare.append(seconds * 1e3 / TOKENS)
                    continue
                run = engine.start(prompt, GREEDY, config)
                t0 = time.perf_counter()
                run.run_all()
                ours.append((time.perf_counter() - t0) * 1e3 / len(run.steps))
                parse.append(sum(s.timing.capture_ms for s in run.steps) / len(run.steps))
    report(bare, ours, parse)


def report(bare: list[float], ours: list[float], parse: list[float]) -> None:
    b, o = statistics.median(bare), statistics.median(ours)
    ratios = sorted(x / y for x, y in zip(ours, bare, strict=True))
    print(f"server's own stream : {b:7.2f} ms/token (median of {ROUNDS}, {TOKENS} tokens)")
    print(f"openai engine       : {o:7.2f} ms/token")
    print(
        f"overhead            : {statistics.median(ratios):7.3f}x median of paired rounds "
        f"({ratios[0]:.3f}-{ratios[-1]:.3f}; target <= 1.10x)"
    )
    own = statistics.median(parse)
    print(f"engine's own parsing: {own:7.3f} ms/token ({(b + own) / b:.4f}x of the stream alone)")
    print(f"load average        : {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
