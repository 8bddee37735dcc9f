"""``llm-lens trace``: run the loop headless and write the JSON trace."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from llm_lens.core.cli.args import Parser, guarded


def trace_parser() -> argparse.ArgumentParser:
    p = Parser(prog="llm-lens trace", description="Run the model headless; write a JSON trace.")
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


def start_run(args: argparse.Namespace, max_new_tokens: int | None = None) -> tuple[Any, Any]:
    """Load the model the options name and generate; returns (engine, finished run)."""
    from llm_lens.core.loading import load_model
    from llm_lens.core.loop.engine import Engine, RunConfig
    from llm_lens.core.sampling import GREEDY, SamplingParams

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
    new_tokens = max_new_tokens or args.max_new_tokens
    config = RunConfig(max_new_tokens=new_tokens, stop_strings=tuple(args.stop))
    say = (lambda _f, _m: None) if args.quiet else (lambda _f, m: print(m, file=sys.stderr))
    engine = Engine(load_model(args.model, args.device, args.dtype, say))
    run = engine.start(engine.tokenize(args.prompt, chat=not args.raw), params, config)
    for step in run:
        if not args.quiet:
            print(step.token.text, end="", file=sys.stderr, flush=True)
    if not args.quiet:
        print(file=sys.stderr)
    return engine, run


def run_trace(args: argparse.Namespace) -> dict[str, Any]:
    from llm_lens.core.exports.trace import run_dict

    engine, run = start_run(args)
    if args.session:
        from llm_lens.core.cli.inspect import write_trace_session

        write_trace_session(run, engine.info, args.session)
    return run_dict(engine, run)


def main(argv: list[str]) -> int:
    def body() -> int:
        args = trace_parser().parse_args(argv)
        data = run_trace(args)
        from llm_lens.core.exports.trace import emit_json

        emit_json(data, args.out)
        return 0

    return guarded("trace", body)
