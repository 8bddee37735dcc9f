"""What the Compare and Branch views do, against a server: samplers side by side as parallel
requests, and a branch as a continuation of a raw prompt's text.

A server keeps no cache a client can fork, so a branch sends the text so far (the prompt, the
tokens before the branch step, the forced token) as a new raw prompt. The server tokenizes that
text afresh: where its tokens are not the ones generated (a word split another way), the
continuation reads a different sequence; ``continuation`` says what text it sent.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from llm_lens.core.engines.openai.client import ServerError
from llm_lens.core.engines.openai.engine import OpenAIEngine, ServedRun
from llm_lens.core.errors import LensError

if TYPE_CHECKING:
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.records import PromptTokens
    from llm_lens.core.sampling import SamplingParams

MAX_PARALLEL = 4


def parallel_runs(
    engine: OpenAIEngine,
    prompt: PromptTokens,
    settings: Sequence[SamplingParams],
    config: RunConfig | None = None,
    cancel: threading.Event | None = None,
) -> list[ServedRun]:
    """One run per setting, their requests in flight together (the Compare view's columns).
    A run refused before its first token raises its one line once every request has ended."""
    if not 1 <= len(settings) <= MAX_PARALLEL:
        raise LensError(f"compare 1 to {MAX_PARALLEL} samplers; got {len(settings)}")
    runs = [engine.start(prompt, params, config, cancel) for params in settings]
    failures: list[ServerError] = []

    def drain(run: ServedRun) -> None:
        try:
            run.run_all()
        except ServerError as exc:
            failures.append(exc)

    threads = [threading.Thread(target=drain, args=(run,), daemon=True) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return runs


def continuation_text(run: ServedRun, step: int, token_text: str) -> str:
    """The raw text a branch at ``step`` sends: the prompt, the tokens chosen before ``step``,
    then ``token_text`` in place of the token chosen there."""
    if run.prompt.chat:
        raise LensError(
            "a served chat run cannot be branched: the server applies its template, so the text "
            "so far is unknown; run the prompt raw (--raw) to branch it"
        )
    if not 0 <= step < len(run.steps):
        raise LensError(f"step {step} is not in this run (0 to {len(run.steps) - 1})")
    before = b"".join(s.token.raw for s in run.steps[:step]).decode("utf-8", "replace")
    return run.prompt.text + before + token_text


def continuation(
    run: ServedRun,
    step: int,
    token_text: str,
    config: RunConfig | None = None,
    cancel: threading.Event | None = None,
) -> ServedRun:
    """A branch of ``run`` at ``step`` forcing ``token_text`` there: a new run on the text so
    far (:func:`continuation_text`), with the run's sampling settings."""
    engine = run.engine
    prompt = engine.tokenize(continuation_text(run, step, token_text), chat=False)
    return engine.start(prompt, run.params, config or run.config, cancel)
