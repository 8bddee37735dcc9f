"""Where a job stands on the server (queued, running, done), and the key that may send one.

nnsight's remote backend reports each status update of a job (RECEIVED, QUEUED, DEPLOYING,
RUNNING, COMPLETED, ERROR, LOG); the backends here hand each to a callback as a
:class:`JobStatus`, so a pane can say "queued" or "running" while the window waits. The local
simulation (``remote="local"``) reports RECEIVED, RUNNING and COMPLETED the same way.

The API key comes from ``NDIF_API_KEY`` or, where the ``keyring`` package is installed, the OS
keyring (service ``ndif``); it is handed to the backend and never written anywhere.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llm_lens.core.errors import LensError

KEY_ENV = "NDIF_API_KEY"
KEYRING_SERVICE = "ndif"
NO_KEY = (
    f"NDIF needs an API key: set {KEY_ENV}, or store it in the OS keyring "
    f"(keyring set {KEYRING_SERVICE} api_key); get one at login.ndif.us"
)


class NdifError(LensError):
    """The server refused or failed the job (a wrong key, a model it does not serve, a lost
    connection): its words in one line."""


def remote_failure(exc: BaseException) -> bool:
    """Is ``exc`` the server's or the network's failure rather than a bug here?"""
    from nnsight.intervention.backends.remote import RemoteError

    names = {type(e).__module__.split(".")[0] for e in type(exc).__mro__}
    return isinstance(exc, RemoteError | ConnectionError | TimeoutError) or bool(
        names & {"httpx", "httpcore", "websocket", "websockets", "socketio"}
    )


@dataclass(frozen=True)
class JobStatus:
    """One status update of a job: its state, the server's words, when it arrived."""

    state: str  # RECEIVED, QUEUED, DEPLOYING, DISPATCHED, RUNNING, COMPLETED, ERROR, LOG
    description: str = ""
    job_id: str = ""
    at: float = 0.0  # time.time()

    @property
    def waiting(self) -> bool:
        """True while the job has not started running (a pane says "queued")."""
        return self.state in ("RECEIVED", "QUEUED", "PROVISIONING", "DEPLOYING", "DISPATCHED")


StatusCallback = Callable[[JobStatus], None]


def api_key() -> str:
    """The NDIF key from the environment or the OS keyring; :class:`LensError` (one line)
    when neither has one."""
    key = os.environ.get(KEY_ENV, "").strip()
    if not key:
        try:
            import keyring  # type: ignore[import-not-found,unused-ignore]

            key = (keyring.get_password(KEYRING_SERVICE, "api_key") or "").strip()
        except Exception:  # noqa: BLE001 - no keyring package or no backend: no key from it
            key = ""
    if not key:
        raise LensError(NO_KEY)
    return key


def remote_backend(model: Any, key: str, on_status: StatusCallback | None, host: str | None) -> Any:
    """nnsight's blocking remote backend for ``model``, reporting each status to ``on_status``."""
    from nnsight.intervention.backends.remote import RemoteBackend

    class ReportingBackend(RemoteBackend):  # type: ignore[misc]
        def note(self, response: Any) -> bool:
            if on_status is not None:
                state = getattr(response.status, "value", str(response.status))
                text = response.description or ""
                on_status(JobStatus(state, text, str(response.id or ""), time.time()))
            done: bool = super().note(response)
            return done

    return ReportingBackend(model.to_model_key(), host=host, api_key=key, blocking=True)


def local_backend(model: Any, on_status: StatusCallback | None) -> Any:
    """nnsight's local simulation of the remote path, reporting RECEIVED, RUNNING, COMPLETED
    (or ERROR) as a server would."""
    from nnsight.intervention.backends.local import LocalSimulationBackend

    def say(state: str, text: str = "") -> None:
        if on_status is not None:
            on_status(JobStatus(state, text, "local", time.time()))

    class ReportingLocal(LocalSimulationBackend):  # type: ignore[misc]
        def __call__(self, tracer: Any) -> None:
            say("RECEIVED")
            say("RUNNING")
            try:
                super().__call__(tracer)
            except Exception as exc:
                say("ERROR", str(exc))
                raise
            say("COMPLETED")

    return ReportingLocal(model)
