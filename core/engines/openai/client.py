"""HTTP to an OpenAI-compatible server with the standard library: JSON requests and a streamed
reply read as server-sent events, each failure one line (:class:`ServerError`).

TLS certificates are verified (the default context). The API key is sent in the Authorization
header only: it is never part of a message, a URL or a ``repr``, and any message that would
quote it (a server echoing the header) has it masked.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from llm_lens.core.engines.base import public_url
from llm_lens.core.errors import LensError

DEFAULT_TIMEOUT_S = 60.0
MAX_ERROR_TEXT = 160


def _shut(response: http.client.HTTPResponse) -> None:
    """Shut the response's socket down (a read blocked on it in another thread returns); a
    response already closed is left as it is."""
    raw = getattr(getattr(response, "fp", None), "raw", None)
    sock = getattr(raw, "_sock", None)
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Stay(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: urllib would send the Authorization header on to wherever
    the server points (another host, or plain http)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class ServerError(LensError):
    """The server could not be reached, refused the request, or sent what cannot be read."""


@dataclass(frozen=True)
class Event:
    """One server-sent event's JSON, with when it arrived (``time.perf_counter`` seconds)."""

    data: dict[str, Any]
    arrived: float


@dataclass(frozen=True)
class Endpoint:
    """Where the server is (``base_url`` ends in its API root, usually ``/v1``) and the key."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def public(self) -> str:
        """The base URL without credentials: what files and messages may name."""
        return public_url(self.base_url)

    @property
    def root(self) -> str:
        """The server's root (``base_url`` without a final ``/v1``), where servers keep their
        own endpoints (``/tokenize``, ``/extras/tokenize``, ``/version``)."""
        base = self.public
        return base[: -len("/v1")] if base.endswith("/v1") else base

    def url(self, path: str) -> str:
        return (self.root if path.startswith("//") else self.public) + "/" + path.lstrip("/")

    def _request(self, path: str, body: dict[str, Any] | None) -> urllib.request.Request:
        headers = {"Accept": "application/json", "User-Agent": "llm-lens"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode("utf-8")
        return urllib.request.Request(
            self.url(path), data, headers, method="POST" if data else "GET"
        )

    def open(self, path: str, body: dict[str, Any] | None = None) -> http.client.HTTPResponse:
        """The response to a GET (no body) or POST; any failure is a :class:`ServerError`."""
        context = ssl.create_default_context()  # certificates and host names verified
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _Stay)
        try:
            response = opener.open(self._request(path, body), timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            raise ServerError(self._http_line(exc, path)) from None
        except urllib.error.URLError as exc:
            raise ServerError(self._reach_line(exc.reason)) from None
        except TimeoutError:
            raise ServerError(self._timeout_line()) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ServerError(self._reach_line(exc)) from None
        return response  # type: ignore[no-any-return]

    def get_json(self, path: str) -> Any:
        with self.open(path) as response:
            return self._json(self._read(response), path)

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        with self.open(path, body) as response:
            return self._json(self._read(response), path)

    def stream(
        self,
        path: str,
        body: dict[str, Any],
        on_open: Callable[[Callable[[], None]], None] | None = None,
    ) -> Iterator[Event]:
        """POST ``body`` and yield each event's JSON as it arrives, until ``[DONE]``.

        A stream that ends without ``[DONE]``, a chunk that is not JSON, an error event or a
        read that times out raises :class:`ServerError`; events already yielded stay yielded.
        ``on_open`` is handed a function that, called from another thread, ends the stream
        (its socket shut down: a blocked read wakes, and the server stops generating).
        """
        with self.open(path, body) as response:
            if on_open is not None:
                on_open(lambda: _shut(response))
            kind = response.headers.get("Content-Type", "")
            if not kind.startswith("text/event-stream"):
                raise ServerError(self._not_streamed(response, kind))
            data: list[str] = []
            while True:
                line = self._readline(response)
                if line is None:
                    raise ServerError("the server closed the stream before it finished")
                if line.startswith("data:"):
                    data.append(line[5:].strip())
                elif line == "" and data:
                    text, data = "\n".join(data), []
                    if text == "[DONE]":
                        return
                    yield Event(self._event(text), time.perf_counter())

    def _readline(self, response: http.client.HTTPResponse) -> str | None:
        try:
            raw = response.readline()
        except TimeoutError:
            raise ServerError(self._timeout_line()) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ServerError(
                f"the stream from {self.public} broke: {self.mask(str(exc))}"
            ) from None
        if not raw:
            return None
        return raw.decode("utf-8", "replace").rstrip("\r\n")

    def _not_streamed(self, response: http.client.HTTPResponse, kind: str) -> str:
        try:
            said = self._message(json.loads(self._read(response)))
        except (ValueError, ServerError):
            said = ""
        what = f"a reply of type {kind or 'unknown'}" + (f": {said}" if said else "")
        return f"the server at {self.public} did not stream (stream=True); it sent {what}"

    def _event(self, text: str) -> dict[str, Any]:
        try:
            data = json.loads(text)
        except ValueError:
            raise ServerError(
                f"the server sent a malformed chunk: {self.mask(text)[:80]!r}"
            ) from None
        if not isinstance(data, dict):
            raise ServerError(f"the server sent a chunk that is not an object: {text[:80]!r}")
        if "error" in data:
            raise ServerError(f"the server stopped with an error: {self._message(data)}")
        return data

    def _read(self, response: http.client.HTTPResponse) -> bytes:
        try:
            return response.read()
        except TimeoutError:
            raise ServerError(self._timeout_line()) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ServerError(
                f"the reply from {self.public} broke: {self.mask(str(exc))}"
            ) from None

    def _json(self, raw: bytes, path: str) -> Any:
        try:
            return json.loads(raw)
        except ValueError:
            text = raw[:80].decode("utf-8", "replace")
            raise ServerError(
                f"{self.url(path)} answered something that is not JSON: {text!r}"
            ) from None

    def mask(self, text: str) -> str:
        """``text`` with the key, should a server have echoed it, replaced by ***."""
        return text.replace(self.api_key, "***") if self.api_key else text

    def _message(self, data: Any) -> str:
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
        text = self.mask(" ".join(str(message).split()))
        return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 1] + "…"

    def _http_line(self, exc: urllib.error.HTTPError, path: str) -> str:
        try:
            body = exc.read()
            detail = self._message(json.loads(body))
        except (ValueError, OSError, http.client.HTTPException):
            detail = ""
        where = self.url(path)
        said = f": {detail}" if detail else ""
        if exc.code in (401, 403):
            return (
                f"the server at {self.public} refused the request ({exc.code}){said}; "
                "set the key in OPENAI_API_KEY or name its variable with --api-key-env"
            )
        if 300 <= exc.code < 400:
            target = public_url(exc.headers.get("Location", "") or "") or "elsewhere"
            return (
                f"{where} redirects ({exc.code}) to {target}; redirects are not followed (the "
                "key would go with them): give the final URL as --base-url"
            )
        if exc.code == 404:
            return (
                f"{where} does not exist (404){said}; is --base-url the server's API root (…/v1)?"
            )
        return f"{where} answered {exc.code} {exc.reason}{said}"

    def _reach_line(self, reason: object) -> str:
        if isinstance(reason, ssl.SSLCertVerificationError):
            why = reason.verify_message
            return f"cannot reach {self.public}: its TLS certificate did not verify ({why})"
        if isinstance(reason, TimeoutError):
            return self._timeout_line()
        text = self.mask(str(getattr(reason, "strerror", None) or reason))
        return f"cannot reach {self.public}: {text}"

    def _timeout_line(self) -> str:
        return f"the server at {self.public} did not answer within {self.timeout_s:g} s"
