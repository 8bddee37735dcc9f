"""Headless commands: ``llm-lens trace`` runs the loop and writes a JSON trace; ``llm-lens kv``
computes KV-cache sizes from a config. No Qt is imported here.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from core.errors import LensError

COMMANDS = ("trace", "kv", "inspect", "compare")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise LensError(message)


def trace_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="llm-lens trace", description="Run the model headless; write a JSON trace.")
    p.add_argument("prompt")
    p.add_argument("--model", default=None, help="folder, .gguf file or hub id (default: bundled)")
    p.add_argument("--raw", action="store_true", help="skip the chat template")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--greedy", action="store_true")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--out", default=None, help="write the trace here (default: stdout)")
    p.add_argument("--session", default=None, help="also save the run as a .llmlens session")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def run_trace(args: argparse.Namespace) -> dict[str, Any]:
    from core.engine import Engine, RunConfig
    from core.loading import load_model
    from core.sampling import GREEDY, SamplingParams
    from core.trace import run_dict

    params = (
        GREEDY
        if args.greedy
        else SamplingParams(
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            min_p=args.min_p,
            repetition_penalty=args.repetition_penalty,
            seed=args.seed,
        )
    )
    config = RunConfig(max_new_tokens=args.max_new_tokens, stop_strings=tuple(args.stop))
    say = (lambda _f, _m: None) if args.quiet else (lambda _f, m: print(m, file=sys.stderr))
    engine = Engine(load_model(args.model, args.device, args.dtype, say))
    run = engine.start(engine.tokenize(args.prompt, chat=not args.raw), params, config)
    for step in run:
        if not args.quiet:
            print(step.token.text, end="", file=sys.stderr, flush=True)
    if not args.quiet:
        print(file=sys.stderr)
    if args.session:
        from core.session_cli import write_trace_session

        write_trace_session(run, engine.info, args.session)
    return run_dict(engine, run)


def main(argv: list[str] | None = None) -> int:
    """Entry of the headless commands; errors are one line on stderr and exit status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = argv[0], argv[1:]
    if command == "kv":
        from core.kvconfig import main_kv

        return main_kv(rest)
    if command == "inspect":
        from core.session_cli import main_inspect

        return main_inspect(rest)
    if command == "compare":
        from core.compare_cli import main_compare

        return main_compare(rest)
    try:
        args = trace_parser().parse_args(rest)
        data = run_trace(args)
        from core.trace import emit_json

        emit_json(data, args.out)
    except LensError as exc:
        print(f"llm-lens {command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"llm-lens {command}: error: {exc}", file=sys.stderr)
        return 2
    return 0
