"""``llm-lens steer --layer L --positive FILE --negative FILE --out vec.npy``: a steering vector.

The difference of the mean residual entering layer L over the positive prompts and over the
negative ones (one prompt a line; :mod:`llm_lens.core.interventions.steer` says which positions
are averaged), written as a ``.npy`` file that ``--intervene resid:L+=vec.npy*S`` adds to every
position of a run with strength S. The prompts are read as typed (no chat template), as
``--raw`` runs read them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from llm_lens.core.cli.args import Parser, doing, guarded
from llm_lens.core.errors import LensError


def steer_parser() -> argparse.ArgumentParser:
    p = Parser(prog="llm-lens steer", description="A steering vector from two sets of prompts.")
    p.add_argument("--layer", type=int, required=True, help="the layer whose input is read")
    p.add_argument("--positive", required=True, metavar="FILE", help="prompts, one a line")
    p.add_argument("--negative", required=True, metavar="FILE", help="prompts, one a line")
    p.add_argument("--out", required=True, help="the .npy file to write the vector to")
    p.add_argument("--model", default=None, help="folder, .gguf file or hub id (default: bundled)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--quiet", action="store_true", help="no loading messages on stderr")
    return p


def read_prompts(path: str) -> list[str]:
    """The non-blank lines of ``path``; one clear error for a file with none."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise LensError(f"{path} is not UTF-8 text") from None
    prompts = [line.strip() for line in lines if line.strip()]
    if not prompts:
        raise LensError(f"{path} holds no prompts (one a line)")
    return prompts


def run_steer(args: argparse.Namespace) -> dict[str, Any]:
    """Build the vector, save it and return its summary."""
    from llm_lens.core.interventions.steer import steering_vector
    from llm_lens.core.loading import load_model
    from llm_lens.core.loop.engine import Engine

    if not args.out.endswith(".npy"):
        raise LensError(f"--out {args.out!r}: the vector is written as a .npy file")
    texts = [read_prompts(args.positive), read_prompts(args.negative)]
    say = (lambda _f, _m: None) if args.quiet else (lambda _f, m: print(m, file=sys.stderr))
    doing(f"loading the model {args.model or 'bundled'}")
    engine = Engine(load_model(args.model, args.device, args.dtype, say))
    positive, negative = ([list(engine.tokenize(t, chat=False).ids) for t in s] for s in texts)
    doing(f"reading {len(positive) + len(negative)} prompts to layer {args.layer}")
    skip = set(engine.tokenizer.all_special_ids)
    vector = steering_vector(engine.model, args.layer, positive, negative, engine.anatomy, skip)
    vector.save(args.out)
    return {
        "out": args.out,
        "layer": vector.layer,
        "size": len(vector.vector),
        "norm": vector.norm,
        "positives": vector.positives,
        "negatives": vector.negatives,
        "use": f"--intervene resid:{vector.layer}+={args.out}*1",
    }


def main(argv: list[str]) -> int:
    def body() -> int:
        args = steer_parser().parse_args(argv)
        print(json.dumps(run_steer(args)))
        return 0

    return guarded("steer", body)
