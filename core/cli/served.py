"""``trace --engine openai``: the options that point a command at a model behind an
OpenAI-compatible server, and the engine they open.

The key is read from an environment variable (``OPENAI_API_KEY``, or the one ``--api-key-env``
names), never from the command line, where it would land in shell histories, process lists and
crash logs.
"""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from llm_lens.core.cli.args import INTERRUPTED, ctrl_c_cancels, finite_float
from llm_lens.core.errors import LensError

T = TypeVar("T")

ENGINES = ("local", "openai")
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
ENGINE_HELP = "where the model runs: local (transformers, here) or openai (a server's API)"
BASE_URL_HELP = "--engine openai: the server's API root, e.g. http://127.0.0.1:8000/v1"
KEY_ENV_HELP = (
    f"--engine openai: the environment variable holding the API key (default {DEFAULT_KEY_ENV}; "
    "none set: no key sent)"
)
TOP_LOGPROBS_HELP = (
    "--engine openai: alternatives to ask for at each step (default 20; -1: every token, which "
    "vLLM started with --max-logprobs -1 returns, making entropy, rank and stages exact)"
)
NO_LOGPROBS_HELP = (
    "--engine openai: ask for no log-probabilities (a server that refuses the field): a "
    "tokens-only run, its tokens and timing"
)
TIMEOUT_HELP = "--engine openai: seconds to wait for the server to answer or send a chunk"
NOT_SERVED = {
    "intervene": "--intervene changes the model's computation; a server runs its model as is",
}
CHAT_BRANCH = (
    "--branch with --engine openai needs --raw: the server applies its chat template, so the "
    "text so far (what a branch sends on) is unknown"
)


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """The engine options (``--engine``, ``--base-url``, ``--api-key-env``, …)."""
    p.add_argument("--engine", choices=ENGINES, default="local", help=ENGINE_HELP)
    p.add_argument("--base-url", default=None, help=BASE_URL_HELP)
    p.add_argument("--api-key-env", default=None, metavar="VAR", help=KEY_ENV_HELP)
    p.add_argument("--top-logprobs", type=int, default=20, help=TOP_LOGPROBS_HELP)
    p.add_argument("--timeout", type=finite_float, default=60.0, help=TIMEOUT_HELP)
    p.add_argument("--no-logprobs", action="store_true", help=NO_LOGPROBS_HELP)


def is_served(args: argparse.Namespace) -> bool:
    return getattr(args, "engine", "local") == "openai"


def check_served(args: argparse.Namespace) -> None:
    """Refuse, before any request, what a served run cannot do."""
    if not is_served(args):
        if getattr(args, "base_url", None):
            raise LensError("--base-url needs --engine openai")
        return
    if not args.base_url:
        raise LensError("--engine openai needs --base-url (the server's API root, …/v1)")
    if not args.base_url.startswith(("http://", "https://")):
        raise LensError(f"--base-url must start with http:// or https://; got {args.base_url!r}")
    if args.top_logprobs < -1 or args.timeout <= 0:
        raise LensError("--top-logprobs must be ≥ 0 (or -1: every token) and --timeout > 0")
    for option, line in NOT_SERVED.items():
        if getattr(args, option, None):
            raise LensError(line)
    if getattr(args, "branch", None) and not getattr(args, "raw", False):
        raise LensError(CHAT_BRANCH)


def api_key(args: argparse.Namespace) -> str | None:
    """The key from the environment; a variable named with --api-key-env must be set."""
    name = args.api_key_env or DEFAULT_KEY_ENV
    key = os.environ.get(name) or None
    if key is None and args.api_key_env:
        raise LensError(f"--api-key-env names {name}, which is not set")
    return key


def open_served(args: argparse.Namespace) -> Any:
    """The OpenAI engine the options name (asks the server which models it serves)."""
    from llm_lens.core.engines.openai import Endpoint, OpenAIEngine

    endpoint = Endpoint(args.base_url, api_key(args), args.timeout)
    logprobs = not getattr(args, "no_logprobs", False)
    return OpenAIEngine(endpoint, args.model, args.top_logprobs, logprobs)


def keep_on_ctrl_c(work: Callable[[threading.Event], T]) -> tuple[T, threading.Event]:
    """``work(cancel)`` (a served run) with Ctrl+C setting ``cancel``: the stream ends within
    a fraction of a second (it is read on a thread of its own) and the run keeps every token
    received, finishing "cancelled", so that its trace and session are still written. A
    second Ctrl+C interrupts at once, writing nothing."""
    cancel = threading.Event()
    done: list[T] = []
    try:
        with ctrl_c_cancels(cancel):
            done.append(work(cancel))
    except KeyboardInterrupt:
        if not done:  # the second Ctrl+C, inside the work
            raise
    return done[0], cancel


def stopped_early(trace: dict[str, Any]) -> int:
    """1, after one line, when a served run stopped on an error; 130 when Ctrl+C stopped it
    (either way its trace keeps every token received); else 0."""
    import sys

    count = len(trace.get("steps", []))
    kept = f"the {count} tokens received are in the trace"
    if trace.get("finish_reason") == "cancelled":
        print(f"llm-lens trace: interrupted (Ctrl+C); {kept}", file=sys.stderr)
        return INTERRUPTED
    line = trace.get("stop_error")
    if not line:
        return 0
    print(f"llm-lens trace: error: {line} ({kept})", file=sys.stderr)
    return 1


def write_served_session(
    run: Any, engine: Any, path: str, branches: Sequence[tuple[Any, int]] = ()
) -> int:
    """Save a served run (and ``branches``: each a path and the step of ``run`` it branched
    at) as a session that reopens without the server: tokens, log-probabilities,
    alternatives and timing, and the engine's identity (its URL without credentials; the key
    is never in it). Bytes written."""
    from llm_lens.core.sessions.format import Session
    from llm_lens.core.sessions.write import save_session

    saved = [_saved(run, engine)]
    saved += [_saved(p, engine, (run.run_id, step)) for p, step in branches]
    session = Session(
        model=engine.info.as_dict(),
        runs=tuple(saved),
        engine=engine.identity.as_dict(),
    )
    return save_session(path, session)


def _saved(run: Any, engine: Any, parent: tuple[int, int] | None = None) -> Any:
    """One served run as a session's run (a stopped run's file says on which error)."""
    from dataclasses import replace

    from llm_lens.core.sessions.format import session_from_run

    saved = session_from_run(run, engine.info, parent=parent)
    if run.stop_error:
        saved = replace(saved, extras_json={**saved.extras_json, "stop_error": run.stop_error})
    return saved


def parse_served_branch(engine: Any, run: Any, spec: str) -> tuple[int, str]:
    """``STEP:TOKEN`` of ``--branch`` against a server → (step, the token's text): an id is
    named by the server's detokenize endpoint, a text must be one token of its tokenizer
    (where it has a tokenize endpoint to say)."""
    step_text, sep, token = spec.partition(":")
    if not sep or not step_text.strip().isdigit() or not token:
        raise LensError(f"--branch takes STEP:TOKEN (e.g. 3:' the' or 3:1165); got {spec!r}")
    step = int(step_text)
    if not 0 <= step < len(run.steps):
        raise LensError(f"--branch step {step} is outside the run's {len(run.steps)} steps")
    if token.isdigit():
        text = engine.ids.text_of(int(token))
        if not text:
            raise LensError(f"--branch token {token}: the server did not name that id")
        return step, text
    text = token.strip("'\"")
    if engine.ids.dialect is not None and engine.ids.id_of(text) < 0:
        raise LensError(f"--branch token {token!r} is not one token of the server's tokenizer")
    return step, text


def grow_served_branches(
    engine: Any, run: Any, specs: Sequence[str], config: Any, cancel: threading.Event
) -> list[tuple[Any, int]]:
    """Each ``STEP:TOKEN`` of ``specs`` as a branch of the served ``run``: a new request on
    the text so far with the token forced (as the window's Branch does), read to its end;
    (path, step) each, ids following the run's."""
    from llm_lens.core.runs.served_branches import grow_path

    grown = []
    for k, spec in enumerate(specs, start=1):
        step, text = parse_served_branch(engine, run, spec)
        grown.append((grow_path(run, step, text, config, cancel, run.run_id + k), step))
    return grown


def branched_trace(args: argparse.Namespace, engine: Any, run: Any, cancel: Any) -> dict[str, Any]:
    """``trace --engine openai --branch …``: the run's trace with its ``branches`` (each grown
    on the server; Ctrl+C stops them); ``--session`` saves the run and its branches."""
    from llm_lens.core.cli.args import doing
    from llm_lens.core.exports.trace import run_dict

    doing("growing the branches on the server")
    with ctrl_c_cancels(cancel):
        grown = grow_served_branches(engine, run, args.branch, run.config, cancel)
    if args.session:
        doing(f"writing the session {args.session}")
        write_served_session(run, engine, args.session, grown)
    return run_dict(engine, run) | {"branches": [run_dict(engine, p) for p, _ in grown]}
