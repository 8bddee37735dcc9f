"""An NDIF model in the window (or any caller with a model thread): what a person chose
(:class:`NdifSpec`: the model, NDIF or nnsight's local simulation, the whole distribution or the
top-N), the engine it opens, its live run as the same ``(tag, payload)`` items
:meth:`~llm_lens.core.runs.workbench.Workbench.live` yields, and what a reopened NDIF session
provides.

The key is never part of a spec: :func:`~llm_lens.core.engines.ndif.status.api_key` reads it
from ``NDIF_API_KEY`` or the OS keyring when the engine opens, and the engine holds it in memory
only. A session records the engine's identity (no key, no credentials in its URL).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from importlib.util import find_spec
from typing import Any

from llm_lens.core.engines.ndif.engine import MISSING, NdifEngine, provided
from llm_lens.core.engines.ndif.program import CaptureSpec
from llm_lens.core.engines.ndif.status import KEY_ENV, StatusCallback, api_key
from llm_lens.core.errors import LensError

Say = Callable[[float, str], None]  # a load's progress: (fraction, message)
LOCAL = "local simulation"
NO_NNSIGHT = 'the NDIF engine needs nnsight: pip install "llm-lens[ndif]" (or make setup)'


@dataclass(frozen=True)
class NdifSpec:
    """A model to open on the NDIF engine.

    ``model``: a Hub id (``org/name``) for NDIF; with ``local`` a model folder, a .gguf file or
    None (the bundled model), whose traces run through nnsight's ``remote="local"`` (serialised
    exactly as for NDIF, run here). ``host``: an NDIF deployment's API root (None: nnsight's
    configured one, api.ndif.us). ``on_status`` receives each job's status updates (on the
    model thread); it is not compared or shown.
    """

    model: str | None
    local: bool = False
    full_logits: bool = False
    host: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    on_status: StatusCallback | None = field(default=None, compare=False, repr=False)

    @property
    def base_url(self) -> str:
        """Where runs go, in words (as a server spec's URL names it in a one-line error)."""
        return f"NDIF ({LOCAL})" if self.local else f"NDIF {self.host or ''}".rstrip()

    @property
    def label(self) -> str:
        """The model's name as the window's prompts name it."""
        return self.model or "the bundled model"

    def check(self) -> None:
        """One line for a model that cannot be opened this way (before anything is read)."""
        model = (self.model or "").strip()
        if self.local:
            if model and not _is_file_or_folder(model):
                raise LensError(
                    f"no model folder or .gguf file at {model!r}: the local simulation runs a "
                    "model on this machine (leave it empty for the bundled model)"
                )
            return
        _check_host(self.host)
        if not model:
            raise LensError("NDIF needs the model's Hub id (e.g. meta-llama/Llama-3.1-8B)")
        if _is_file_or_folder(model) or model.count("/") != 1 or " " in model:
            raise LensError(
                f"{model!r} is not a Hub id (org/name): NDIF runs the models it hosts; "
                "choose the local simulation for a folder on this machine"
            )

    def open(self, say: Say | None = None) -> NdifEngine:
        """The engine (loads a local model, or reads the hosted one's configuration); a bad
        id, no key or an unreachable Hub is one :class:`LensError` line."""
        self.check()
        if find_spec("nnsight") is None:
            raise LensError(NO_NNSIGHT)
        say = say or (lambda _f, _m: None)
        if self.local:
            from llm_lens.core.loading import load_model

            engine = NdifEngine.local(load_model(self.model or None, self.device, self.dtype, say))
        else:
            key = api_key()  # no key: one line, before anything is fetched
            say(0.1, f"reading {self.model}'s configuration for NDIF")
            engine = _hosted(str(self.model), key, self.host)
        engine.spec = replace(engine.spec, full_logits=self.full_logits)
        engine.on_status = self.on_status
        say(1.0, f"{engine.info.name} on {engine.source}")
        return engine


def _check_host(host: str | None) -> None:
    """One line for a server address nnsight could not use, or one holding credentials (the
    key is the only credential, and it is never typed or saved here)."""
    from urllib.parse import urlsplit

    if host is None:
        return
    if not host.startswith(("http://", "https://")):
        raise LensError(f"the NDIF server must start with http:// or https://; got {host!r}")
    parts = urlsplit(host)
    if parts.username or parts.password or parts.query:
        raise LensError("the NDIF server's address must hold no user, password or query: "
                        f"the key comes from {KEY_ENV} or the OS keyring")  # fmt: skip


def _is_file_or_folder(model: str) -> bool:
    path = os.path.expanduser(model)
    return os.path.isdir(path) or os.path.isfile(path) or path.endswith(".gguf")


def _hosted(hub_id: str, key: str, host: str | None) -> NdifEngine:
    """:meth:`NdifEngine.hosted`, its failure to read the Hub (a wrong id, offline) one line."""
    try:
        return NdifEngine.hosted(hub_id, key, host)
    except LensError:
        raise
    except (OSError, ValueError, KeyError, ImportError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LensError(
            f"NDIF: cannot read {hub_id}'s configuration and tokenizer: {first}"
        ) from exc


def ndif_live(
    engine: NdifEngine, request: Any, cancel: threading.Event, store: Any = None
) -> Iterator[tuple[str, Any]]:
    """A live run as one NDIF job, as ``Workbench.live``'s items: ``run_started``
    (PromptTokens), then once the job returned each ``step`` (StepRecord), ``run_finished``
    (RunSummary). ``request`` is a :class:`~llm_lens.core.runs.workbench.RunRequest`;
    ``store`` (a ``RunStore``) keeps the run, so that a save finds it."""
    if request.interventions:
        raise LensError(MISSING["interventions"])
    prompt = engine.tokenize(request.text, request.chat, parse_special=request.parse_special)
    heads = tuple(getattr(request, "heads", ()))  # the heads opened: their attention rows
    spec = replace(engine.spec, top_n=request.config.top_n, heads=heads)
    run = engine.start(prompt, request.params, request.config, cancel, spec=spec)
    run.run_id = request.run_id
    if store is not None:
        store.runs = {request.run_id: run}
    yield "run_started", prompt
    for record in run:
        yield "step", record
    yield "run_finished", run.summary()


def recorded_provides(engine: dict[str, Any] | None) -> Any:
    """What a reopened session's NDIF engine provided (from the identity it recorded), or
    None when ``engine`` is not NDIF's."""
    from llm_lens.core.engines.base import Provides

    if not engine or engine.get("name") != NdifEngine.name:
        return None
    full = engine.get("capture") == "full logits"
    fills, missing = provided(CaptureSpec(full_logits=full), engine.get("routing") == "yes")
    top_n = -1 if full else CaptureSpec().top_n
    return Provides(frozenset(fills), missing, top_n, not full, head_rows=True)
