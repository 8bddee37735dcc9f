"""``llm-lens trace --branch STEP:TOKEN``: branches of the traced run, grown headless with the
same :class:`~llm_lens.core.runs.history.RunHistory` the window uses, and saved as one tree."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from llm_lens.core.errors import PromptError
from llm_lens.core.loop.engine import Engine, Run, RunConfig
from llm_lens.core.runs.branching import PathRun
from llm_lens.core.runs.history import RunHistory, RunStore


def parse_branch(engine: Engine, spec: str) -> tuple[int, int]:
    """``STEP:TOKEN`` → (step, token id); TOKEN is an id or text that is exactly one token."""
    step_text, sep, token = spec.partition(":")
    if not sep or not step_text.strip().isdigit() or not token:
        raise PromptError(f"--branch takes STEP:TOKEN (e.g. 3:' the' or 3:1165); got {spec!r}")
    if token.isdigit():
        token_id = int(token)
    else:
        ids = engine.tokenizer.encode(token.strip("'\""), add_special_tokens=False)
        if len(ids) != 1:
            raise PromptError(f"--branch token {token!r} is {len(ids)} tokens, not one")
        token_id = int(ids[0])
    return int(step_text), token_id


def grow_branches(
    engine: Engine, run: Run, specs: Sequence[str], config: RunConfig,
    cancel: threading.Event | None = None,
) -> tuple[RunHistory, RunStore, list[PathRun]]:  # fmt: skip
    """Each ``STEP:TOKEN`` of ``specs`` as a branch of ``run`` (ids follow the run's)."""
    history, store = RunHistory(), RunStore()
    history.add_root(store, run)
    paths = []
    for k, spec in enumerate(specs, start=1):
        step, token_id = parse_branch(engine, spec)
        if not 0 <= step < len(run.steps):
            raise PromptError(f"--branch step {step} is outside the run's {len(run.steps)} steps")
        growth = history.grow(engine, store, run.run_id, step, token_id,
                              config.max_new_tokens, run.run_id + k, cancel=cancel)  # fmt: skip
        for _ in growth:
            pass
        paths.append(growth.path)
    return history, store, paths


def save_tree(
    path: str | os.PathLike[str], engine: Engine, history: RunHistory, store: RunStore,
    shown_id: int,
) -> int:  # fmt: skip
    """Save every run of ``history`` (with its recorded views) as one session; bytes written."""
    from llm_lens.core.sessions.assemble import assemble_session
    from llm_lens.core.sessions.views import recorded_run
    from llm_lens.core.sessions.write import save_session

    memo: dict[str, Any] = {}

    def make(run: Any, label: str | None = None, parent: Any = None) -> Any:
        return recorded_run(run, label, parent, memo)

    session = assemble_session(engine.info, history, store, shown_id, make)
    return save_session(path, session)
