"""``llm-lens patch CLEAN CORRUPT --metric A [B]``: the activation-patching maps as JSON.

``residual`` is layers × positions (the corrupted run with the residual entering layer l at
position p replaced by the clean run's), ``heads`` is layers × heads (head h's output at layer l,
at every position, replaced by the clean run's); ``clean`` and ``corrupt`` are each run's metric:
the logit difference of A and B at the last position, or A's probability without B.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from llm_lens.core.cli.args import Parser, add_placement, cancellable, doing, guarded
from llm_lens.core.cli.trace import PARTLY_RANDOM_HELP, local_engine
from llm_lens.core.errors import LensError

METRIC_HELP = "one-token texts: logit(A) - logit(B), or A's probability when B is left out"


def patch_parser() -> argparse.ArgumentParser:
    p = Parser(prog="llm-lens patch", description="Activation patching: clean into corrupted.")
    p.add_argument("clean")
    p.add_argument("corrupt")
    p.add_argument("--metric", nargs="+", required=True, metavar="TOKEN", help=METRIC_HELP)
    p.add_argument("--model", default=None, help="folder, .gguf file or hub id (default: bundled)")
    p.add_argument("--raw", action="store_true", help="skip the chat template")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    add_placement(p)
    p.add_argument("--out", default=None, help="write the JSON here ('-' or default: stdout)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--allow-partly-random", action="store_true", help=PARTLY_RANDOM_HELP)
    return p


def one_token(engine: Any, text: str) -> int:
    """The id of ``text`` as one token, or a one-line error naming the tokens it is."""
    ids = engine.tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        pieces = ", ".join(repr(engine.texts.text(i)) for i in ids)
        raise LensError(f"--metric {text!r} is {len(ids)} tokens ({pieces}), not one")
    return int(ids[0])


def run_patch(args: argparse.Namespace) -> dict[str, Any]:
    from llm_lens.core.interventions.sweep import Metric, SweepResult, patching_sweep

    if len(args.metric) > 2:
        raise LensError(f"--metric takes one or two tokens; got {len(args.metric)}")
    engine = local_engine(args)
    clean, corrupt = (engine.tokenize(t, chat=not args.raw) for t in (args.clean, args.corrupt))
    ids = [one_token(engine, t) for t in args.metric]
    metric = Metric(ids[0], ids[1] if len(ids) > 1 else None)
    doing(f"patching {len(clean)} positions of {engine.info.num_layers} layers")

    def progress(done: int, total: int) -> None:
        if not args.quiet:
            print(f"\rpatching: {done}/{total}", end="", file=sys.stderr, flush=True)

    def sweep(cancel: threading.Event) -> SweepResult:
        model, anatomy = engine.model, engine.anatomy
        return patching_sweep(
            model, list(clean.ids), list(corrupt.ids), metric, anatomy, cancel, progress
        )

    result, _cancel = cancellable(sweep)
    if not args.quiet:
        print(file=sys.stderr)
    tokens = {"clean_tokens": [t.text for t in clean.tokens]}
    data = result.to_dict() | tokens | {"corrupt_tokens": [t.text for t in corrupt.tokens]}
    if engine.info.partly_random:  # the maps are of a model with random weights: say so
        data["partly_random"] = engine.info.partly_random
    return data


def main(argv: list[str]) -> int:
    def body() -> int:
        args = patch_parser().parse_args(argv)
        data = run_patch(args)
        from llm_lens.core.exports.trace import emit_json

        emit_json(data, args.out)
        return 0

    return guarded("patch", body)
