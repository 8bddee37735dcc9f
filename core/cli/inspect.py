"""``llm-lens inspect FILE.llmlens`` and the trace command's ``--session FILE.llmlens`` output.

Inspecting needs neither Qt nor torch nor the model: a session file holds everything it prints.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from llm_lens.core.cli.args import Parser, guarded
from llm_lens.core.fileio import user_path
from llm_lens.core.sessions.format import FORMAT, PARTS, Session, SessionRun
from llm_lens.core.sessions.read import load_session
from llm_lens.core.sessions.write import estimate_size, save_session

TEXT_LIMIT = 400  # characters of a prompt or output shown by inspect


def inspect_parser() -> argparse.ArgumentParser:
    p = Parser(prog="llm-lens inspect", description="Summarize an LLM Lens session file.")
    p.add_argument("file", help="a .llmlens session file")
    return p


def main(argv: list[str]) -> int:
    """Print a session's summary; a bad file is one line on stderr and exit status 2."""

    def body() -> int:
        args = inspect_parser().parse_args(argv)
        path = user_path(args.file)  # an unknown ~user is one line, not a RuntimeError
        session = load_session(path)
        print(describe(session, os.path.getsize(path)))
        return 0

    return guarded("inspect", body)


def describe(session: Session, file_size: int | None = None) -> str:
    """A plain-text summary: model, then each run's prompt, steps, finish and output, then sizes."""
    m = session.model
    lines = [
        f"session   {FORMAT}, saved by LLM Lens {session.app_version} at {session.created}",
        f"model     {m.get('name')} (weights {m.get('weights_id')}; {m.get('num_layers')} layers,"
        f" vocab {m.get('vocab_size')}, {m.get('dtype')})",
        f"runs      {len(session.runs)}",
    ]
    if session.engine is not None:  # a run made by a server (or another engine)
        e = session.engine
        where = f" at {e['url']}" if e.get("url") else ""
        lines.insert(2, f"engine    {e.get('name')}: {e.get('model')}{where}")
    for run in session.runs:
        lines += _describe_run(run)
    for c in session.comparisons:
        ids = ", ".join(str(session.runs[i].run_id) for i in c.runs)
        lines.append(f"compared  runs {ids} from one prefill ({c.shared_prefill_ms:.0f} ms)")
    sizes = estimate_size(session)
    parts = ", ".join(f"{p} {_bytes(sizes[p])}" for p in PARTS)
    on_disk = f"{_bytes(file_size)} on disk; " if file_size is not None else ""
    lines.append(f"size      {on_disk}uncompressed {_bytes(sizes['total'])}: {parts}")
    return "\n".join(lines)


def _describe_run(run: SessionRun) -> list[str]:
    branch = f", branched from run {run.parent[0]} at step {run.parent[1]}" if run.parent else ""
    kind = "chat" if run.prompt.chat else "raw"
    return [
        f"run {run.run_id}     {_quote(run.label)}: {len(run.steps)} steps, "
        f"finish {run.finish_reason or 'none'}{branch}",
        f"  prompt  {_quote(run.prompt.text)} ({kind}, {len(run.prompt)} tokens)",
        f"  output  {_quote(run.output_text())}",
        f"  sampler {_sampler(run.params)}",
    ]


def _sampler(params: dict[str, Any]) -> str:
    if params.get("greedy") or params.get("temperature") == 0:
        return "greedy"
    return ", ".join(f"{k} {v}" for k, v in params.items() if k != "greedy")


def _quote(text: str) -> str:
    cut = text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "…"
    return json.dumps(cut, ensure_ascii=False)


def _bytes(n: int) -> str:
    """Decimal units, as file managers show sizes."""
    if n < 1000:
        return f"{n} B"
    size = float(n)
    for unit in ("kB", "MB"):
        size /= 1000
        if size < 1000:
            return f"{size:.1f} {unit}"
    return f"{size / 1000:.1f} GB"


def write_trace_session(run: Any, info: Any, path: str | os.PathLike[str]) -> int:
    """Save a finished run as a one-run session (with prompt maps when T ≤ 256); bytes written."""
    from llm_lens.core.sessions.views import recorded_run

    return save_session(path, Session(model=info.as_dict(), runs=(recorded_run(run),)))
