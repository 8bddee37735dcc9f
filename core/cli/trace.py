"""``llm-lens trace``: run the loop headless and write the JSON trace."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from llm_lens.core.cli import served
from llm_lens.core.cli.args import (
    Parser,
    add_placement,
    cancellable,
    cap_new_tokens,
    ctrl_c_cancels,
    doing,
    finite_float,
    guarded,
    placement,
    seed_int,
    token_count,
)
from llm_lens.core.cli.served import add_engine_args
from llm_lens.core.errors import NonFiniteError

RAW_HELP = (
    "skip the chat template: the model reads the text as typed (plus the tokenizer's BOS, if any); "
    "special-token text in it is still read as ordinary text unless --parse-special"
)
PARSE_SPECIAL_HELP = (
    "parse special tokens in my text: typed '<|im_start|>' becomes the control token, not text "
    "(default: the prompt's special-token text is tokenized as ordinary text, in chat and raw mode)"
)
OUT_HELP = "write the JSON here, atomically ('-' or default: stdout)"
PARTLY_RANDOM_HELP = (
    "load a model whose files lack weights its config needs (or hold others): those are random, "
    "and the trace and session say 'partly random' (default: refuse the load, naming them)"
)
INTERVENE_HELP = (
    "change the model for this run (repeatable): head:L.H=0, head:L.H*F, head:L.H=mean, "
    "attn:L=0, mlp:L*F, resid:L@P+=VEC.npy, resid:L@P=ROWS.npy, expert:L.E=off, "
    "expert:L.E,F=force, forget:P (a hybrid model's attention layers only: its Mamba, DeltaNet "
    "or convolution state still carries the token; see llm_lens.core.interventions.specs)"
)


def trace_parser() -> argparse.ArgumentParser:
    p = Parser(prog="llm-lens trace", description="Run the model headless; write a JSON trace.")
    p.add_argument("prompt")
    p.add_argument("--model", default=None, help="folder, .gguf file or hub id (default: bundled)")
    p.add_argument("--raw", action="store_true", help=RAW_HELP)
    p.add_argument("--parse-special", action="store_true", help=PARSE_SPECIAL_HELP)
    p.add_argument("--max-new-tokens", type=token_count, default=32)
    p.add_argument("--greedy", action="store_true")
    p.add_argument("--temperature", type=finite_float, default=0.7)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=finite_float, default=0.95)
    p.add_argument("--min-p", type=finite_float, default=0.0)
    p.add_argument("--repetition-penalty", type=finite_float, default=1.0)
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    add_placement(p)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--out", default=None, help=OUT_HELP)
    p.add_argument("--session", default=None, help="also save the run as a .llmlens session")
    p.add_argument(
        "--branch", action="append", default=[], metavar="STEP:TOKEN",
        help="also branch the run at STEP with TOKEN (an id, or text that is one token); "
        "repeatable; the JSON gets 'branches', --session saves the whole tree",
    )  # fmt: skip
    p.add_argument("--intervene", action="append", default=[], metavar="SPEC", help=INTERVENE_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--allow-partly-random", action="store_true", help=PARTLY_RANDOM_HELP)
    add_engine_args(p)  # --engine openai --base-url URL [--api-key-env VAR] (cli/served.py)
    from llm_lens.core.cli import ndif

    ndif.add_arguments(p)  # ndif joins --engine's choices; --open-head, --full-logits
    return p


def read_interventions(args: argparse.Namespace) -> list[Any]:
    """The ``--intervene`` SPECs as interventions (a malformed one: one line, exit 2); checked
    against the model when the run starts."""
    specs = getattr(args, "intervene", None) or []
    if not specs:
        return []
    from llm_lens.core.interventions import parse_spec

    return [parse_spec(spec) for spec in specs]


def check_inputs(args: argparse.Namespace, session: str | None = None) -> None:
    """Refuse a prompt or an output the run could not use, before the model is loaded."""
    from llm_lens.core.errors import LensError
    from llm_lens.core.fileio import output_target, write_target
    from llm_lens.core.tokens import check_text

    check_text(args.prompt)
    served.check_served(args)
    for stop in args.stop:
        check_text(stop, "a --stop string")
    args.interventions = read_interventions(args)
    if args.interventions and getattr(args, "branch", None):
        raise LensError("--branch and --intervene together are not supported yet")
    out = output_target(args.out)
    if session is not None and write_target(session) == out:
        raise LensError(
            f"--out and --session name the same file ({session}); "
            "the trace would replace the session"
        )


def load_engine(args: argparse.Namespace) -> tuple[Any, Any]:
    """Load the model the options name and tokenize the prompt as they say: (engine, prompt)."""
    if served.is_served(args):
        doing(f"asking {args.base_url} for its models")
        engine = served.open_served(args)
        return engine, engine.tokenize(args.prompt, not args.raw, parse_special=args.parse_special)
    engine = local_engine(args)
    prompt = engine.tokenize(args.prompt, chat=not args.raw, parse_special=args.parse_special)
    return engine, prompt


def local_engine(args: argparse.Namespace) -> Any:
    """The model ``--model`` names, loaded here as ``--device``, ``--dtype``, the placement
    options and ``--allow-partly-random`` say (a partly random one: a warning line on stderr);
    trace, compare, explain and patch load through this."""
    from llm_lens.core.loading import load_model
    from llm_lens.core.loop.engine import Engine

    say = (lambda _f, _m: None) if args.quiet else (lambda _f, m: print(m, file=sys.stderr))
    doing(f"loading the model {args.model or 'bundled'}")
    allow = bool(getattr(args, "allow_partly_random", False))
    engine = Engine(load_model(args.model, args.device, args.dtype, say, placement(args), allow))
    if engine.info.partly_random:
        print(f"llm-lens: warning: {args.model}: {engine.info.partly_random}", file=sys.stderr)
    return engine


def start_run(
    args: argparse.Namespace, max_new_tokens: int | None = None
) -> tuple[Any, Any, threading.Event]:
    """Load the model the options name and generate (Ctrl+C stops between steps); returns
    (engine, finished run, its cancel event)."""
    from llm_lens.core.sampling import GREEDY, SamplingParams

    sampled = SamplingParams(  # checked before torch is even imported, greedy or not
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repetition_penalty=args.repetition_penalty,
        seed=args.seed,
    )
    params = GREEDY if args.greedy else sampled
    from llm_lens.core.loop.engine import RunConfig

    engine, prompt = load_engine(args)
    asked = max_new_tokens or args.max_new_tokens
    new_tokens = cap_new_tokens(asked, len(prompt.ids), engine.info.context_length)
    config = RunConfig(max_new_tokens=new_tokens, stop_strings=tuple(args.stop))
    doing(f"generating with {engine.info.name}")

    def generate(cancel: threading.Event) -> Any:
        changes = getattr(args, "interventions", None) or read_interventions(args)
        more = {"interventions": changes} if changes else {}
        run = engine.start(prompt, params, config, cancel, **more)
        try:
            for step in run:
                if not args.quiet:
                    text = step.token.text.encode("utf-8", "replace").decode("utf-8")
                    print(text, end="", file=sys.stderr, flush=True)
        except NonFiniteError as exc:
            exc.partial = (engine, run)  # type: ignore[attr-defined]  # the steps before it
            raise
        finally:
            if not args.quiet:
                print(file=sys.stderr)  # the streamed text ends its line, whatever happens
        return run

    keep = served.keep_on_ctrl_c if served.is_served(args) else cancellable  # tokens kept
    run, cancel = keep(generate)
    return engine, run, cancel


def run_trace(args: argparse.Namespace) -> dict[str, Any]:
    from llm_lens.core.exports.trace import run_dict

    if getattr(args, "engine", "local") == "ndif":
        from llm_lens.core.cli.ndif import ndif_trace

        return ndif_trace(args)

    engine, run, cancel = start_run(args)
    if args.branch and served.is_served(args):  # each branch a request on the text so far
        return served.branched_trace(args, engine, run, cancel)
    if args.branch:
        from llm_lens.core.cli.branches import grow_branches, save_tree

        doing("growing the branches")
        with ctrl_c_cancels(cancel):
            history, store, paths = grow_branches(engine, run, args.branch, run.config, cancel)
        if args.session:
            doing(f"writing the session {args.session}")
            save_tree(args.session, engine, history, store, run.run_id)
        return run_dict(engine, run) | {"branches": [run_dict(engine, p) for p in paths]}
    if args.session and served.is_served(args):
        doing(f"writing the session {args.session}")
        served.write_served_session(run, engine, args.session)
    elif args.session:
        doing(f"writing the session {args.session}")
        from llm_lens.core.cli.inspect import write_trace_session

        write_trace_session(run, engine.info, args.session)
    return run_dict(engine, run)


def non_finite_trace(exc: NonFiniteError) -> dict[str, Any]:
    """The trace of a run the model broke: its steps before the failing one, finish reason
    ``"non_finite"`` and the ``non_finite`` record (step, value, layer, sublayer, where,
    positions)."""
    from llm_lens.core.exports.trace import run_dict
    from llm_lens.core.loop.nonfinite import placed

    engine, run = exc.partial  # type: ignore[attr-defined]
    data = run_dict(engine, run)
    return data | {"finish_reason": "non_finite", "non_finite": placed(exc).as_dict()}


def main(argv: list[str]) -> int:
    def body() -> int:
        args = trace_parser().parse_args(argv)
        check_inputs(args, args.session)
        from llm_lens.core.exports.trace import emit_json

        try:
            data = run_trace(args)
        except NonFiniteError as exc:  # the trace so far, and where: then the line, exit 1
            emit_json(non_finite_trace(exc), args.out)
            raise
        emit_json(data, args.out)
        return served.stopped_early(data)

    return guarded("trace", body)
