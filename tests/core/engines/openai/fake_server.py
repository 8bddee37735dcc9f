"""A test double of an OpenAI-compatible server on 127.0.0.1 (http.server in a thread): it
plays a script of chunks, or fails as a real server can (401, a malformed chunk, a stream cut
mid-way, a pause past the client's timeout). Not shipped: the product talks to real servers."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def chat_chunk(text: str, logprob: float, tops: list[tuple[str, float]], finish=None) -> dict:
    entry = {
        "token": text,
        "logprob": logprob,
        "bytes": list(text.encode()),
        "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in tops],
    }
    return {
        "model": "fake-model",
        "choices": [
            {"index": 0, "delta": {"content": text}, "logprobs": {"content": [entry]},
             "finish_reason": finish}
        ],
    }  # fmt: skip


SCRIPT = [
    chat_chunk("Hello", -0.1, [("Hello", -0.1), ("Hi", -2.5)]),
    chat_chunk(" world", -0.5, [(" world", -0.5), (" there", -1.2), ("!", -3.0)]),
    {"model": "fake-model", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"model": "fake-model", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2,
     "prompt_tokens_details": {"cached_tokens": 4}}},
]  # fmt: skip

# the same reply where the alternatives are a whole distribution (their probabilities sum to 1),
# as a server asked for every token's log-probability sends: mode "whole"
WHOLE = [
    chat_chunk("Hello", math.log(0.9), [("Hello", math.log(0.9)), ("Hi", math.log(0.1))]),
    chat_chunk(" world", math.log(0.6),
               [(" world", math.log(0.6)), (" there", math.log(0.3)), ("!", math.log(0.1))]),
    *SCRIPT[2:],
]  # fmt: skip


class Fake:
    """What the fake server does, by ``mode``: "ok"; "401"; "malformed"; "cut" (the connection
    closes mid-stream); "slow" (a 2 s pause); "bare" (no logprobs); "400" (the generation
    request refused); "nofinish" ([DONE] without a finish reason, as llama-cpp-python ends a
    stream it cuts when another request comes); "redirect" (307 elsewhere); "nostream" (one
    JSON reply); "whole" (alternatives that are the whole distribution). The requests it
    received (bodies, headers) are kept for the tests to read."""

    def __init__(self, mode: str = "ok", key: str | None = None) -> None:
        self.mode, self.key = mode, key
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []


def handler_for(fake: Fake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _refuse(self) -> bool:
            self.headers_seen = dict(self.headers)
            fake.headers.append(dict(self.headers))
            wanted = f"Bearer {fake.key}" if fake.key else None
            if fake.mode == "401" or (wanted and self.headers.get("Authorization") != wanted):
                self._json(401, {"error": {"message": "Invalid API key"}})
                return True
            return False

        def _json(self, code: int, data: Any) -> None:
            raw = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if self._refuse():
                return
            if self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": "fake-model"}]})
            else:
                self._json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self._refuse():
                return
            if self.path != "/v1/chat/completions":
                self._json(404, {"error": {"message": "not found"}})
                return
            fake.bodies.append(body)
            if fake.mode == "redirect":
                self.send_response(307)
                self.send_header("Location", "http://user:pw@elsewhere.invalid/v1/chat/completions")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if fake.mode == "nostream":  # a server that ignores stream=True
                self._json(200, {"choices": [{"message": {"content": "Hello"}}]})
                return
            if fake.mode == "400":
                self._json(400, {"error": {"message": "the prompt is longer than the context"}})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self._play()

        def _send(self, text: str) -> None:
            self.wfile.write(f"data: {text}\n\n".encode())
            self.wfile.flush()

        def _play(self) -> None:
            for n, chunk in enumerate(WHOLE if fake.mode == "whole" else SCRIPT):
                if n == 1 and fake.mode == "malformed":
                    self._send('{"choices": [ not json')
                    return
                if n == 1 and fake.mode == "cut":
                    return  # the connection closes: no [DONE]
                if n == 1 and fake.mode == "slow":
                    time.sleep(2.0)
                if n == 2 and fake.mode == "nofinish":
                    continue  # [DONE] comes, but no finish reason ever did
                if fake.mode == "bare":  # a server that sends no logprobs
                    chunk = {**chunk, "choices": [
                        {k: v for k, v in c.items() if k != "logprobs"} for c in chunk["choices"]
                    ]}  # fmt: skip
                self._send(json.dumps(chunk))
            self._send("[DONE]")

    return Handler


@contextmanager
def serving(fake: Fake) -> Iterator[str]:
    """The fake server's API root (http://127.0.0.1:PORT/v1) while inside."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(fake))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
