"""A served model in the window (or any caller with a model thread): the server it opens from
what a person types (:class:`ServerSpec`: URL, model, the *name* of the key's environment
variable, never the key), the live run as the same ``(tag, payload)`` items
:meth:`~llm_lens.core.runs.workbench.Workbench.live` yields, and what a reopened served session
provides.

A run that fails after its first token ends with ``finish_reason`` "error" and its summary's
``extra["stop_error"]`` says the line; every token received stays in the run.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from llm_lens.core.engines.base import Provides
from llm_lens.core.engines.openai.client import Endpoint
from llm_lens.core.engines.openai.engine import (
    DEFAULT_TOP_LOGPROBS,
    MISSING,
    OpenAIEngine,
    ServedRun,
    tokens_only_provides,
)
from llm_lens.core.errors import LensError
from llm_lens.core.records import StepRecord

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
STEPS_NAMED = "steps_named"  # served_live's item: the run's steps as it ended (ids named)
SERVED_FILLS = frozenset({"tokens", "logprobs", "alternatives", "timing", "prefix_cache"})


@dataclass(frozen=True)
class ServerSpec:
    """A server to open: its API root, the model (None: the only one it serves), the name of
    the environment variable holding its key (unset: no key sent), the seconds to wait."""

    base_url: str
    model: str | None = None
    key_env: str = DEFAULT_KEY_ENV
    timeout_s: float = 60.0
    top_logprobs: int = DEFAULT_TOP_LOGPROBS
    logprobs: bool = True  # False: ask for none (a server that refuses the field)

    def check(self) -> None:
        """One line for what cannot be a server's address or a variable's name."""
        if not self.base_url.startswith(("http://", "https://")):
            raise LensError(f"the server's URL must start with http:// or https://; got "
                            f"{self.base_url!r}")  # fmt: skip
        if self.key_env and not self.key_env.replace("_", "a").isalnum():
            raise LensError(f"{self.key_env!r} is not the name of an environment variable")

    def endpoint(self) -> Endpoint:
        self.check()
        key = os.environ.get(self.key_env) or None if self.key_env else None
        return Endpoint(self.base_url, key, self.timeout_s)


def open_server(spec: ServerSpec) -> OpenAIEngine:
    """The engine of ``spec`` (asks the server which models it serves: a wrong URL or key is
    one line here)."""
    return OpenAIEngine(spec.endpoint(), spec.model or None, spec.top_logprobs, spec.logprobs)


def served_models(spec: ServerSpec) -> list[str]:
    """The model ids the server lists (for a dialog's choice)."""
    reply = spec.endpoint().get_json("models")
    data = reply.get("data") if isinstance(reply, dict) else None
    listed = data if isinstance(data, list) else []
    return [str(m["id"]) for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]


def served_live(
    engine: OpenAIEngine, request: Any, cancel: threading.Event, store: Any = None
) -> Iterator[tuple[str, Any]]:
    """A live run on the server, as ``Workbench.live``'s items: ``run_started``
    (PromptTokens), ``step`` (each StepRecord), then :data:`STEPS_NAMED` (every step as the run
    ended, where any record changed: a text-only server's ids, asked of its tokenize endpoint
    once the stream ended, and the last step's finish reason), ``run_finished`` (RunSummary).
    ``request`` is a :class:`~llm_lens.core.runs.workbench.RunRequest`; ``store`` (a
    ``RunStore``) keeps the run, so that a save finds it."""
    if request.interventions:
        raise LensError(MISSING["interventions"])
    prompt = engine.tokenize(request.text, request.chat, parse_special=request.parse_special)
    run: ServedRun = engine.start(prompt, request.params, request.config, cancel)
    run.run_id = request.run_id
    if store is not None:
        store.runs = {request.run_id: run}
    yield "run_started", prompt
    streamed = []
    for record in run:
        streamed.append(record)
        yield "step", record
    ended = tuple(run.steps)
    if list(map(id, ended)) != list(map(id, streamed)):  # a record replaced after the stream
        yield STEPS_NAMED, ended
    yield "run_finished", run.summary()


def recorded_provides(engine: dict[str, Any] | None) -> Provides | None:
    """What a reopened session's engine provided (None: everything, the local engine)."""
    if not engine or engine.get("name") != OpenAIEngine.name:
        return None
    return Provides(SERVED_FILLS, MISSING, DEFAULT_TOP_LOGPROBS, approximate=True)


def run_provides(found: Provides | None, steps: Sequence[StepRecord]) -> Provides | None:
    """``found`` (an engine's, or a reopened session's; None: a local model's, everything)
    narrowed to a tokens-only run's where the shown run's steps carry no log-probability (its
    server sent none): the panes that draw probabilities then say why in one line."""
    if found is None or not steps:
        return found
    first = steps[0]
    if first.logits.size == 0 and math.isnan(first.logprob) and len(first.top_ids) == 0:
        return tokens_only_provides()
    return found


def served_session(session: Any, engine: Any) -> Any:
    """``session`` (a :class:`~llm_lens.core.sessions.format.Session`) with ``engine``'s
    identity recorded, when ``engine`` is a server's (its URL without credentials)."""
    import dataclasses

    if not isinstance(engine, OpenAIEngine):
        return session
    return dataclasses.replace(session, engine=engine.identity.as_dict())
