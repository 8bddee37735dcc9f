"""``llm-lens trace --engine ndif``: the run as an nnsight trace on NDIF, or on this machine.

A local folder, a .gguf file or the bundled model (no ``--model``) runs through nnsight's
``remote="local"`` backend: the trace is serialised exactly as for NDIF and run here. A Hub id
is sent to NDIF with the key from ``NDIF_API_KEY`` or the OS keyring (never written anywhere);
no key is one line. The JSON is the local trace's, its lens the one the server computed, with
an ``engine`` entry saying where the run went and how many bytes came back.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from llm_lens.core.cli.args import doing
from llm_lens.core.errors import LensError

UNSUPPORTED = ("session", "branch", "interventions")
NDIF_HELP = "nnsight traces on NDIF (a Hub id, key from NDIF_API_KEY or the keyring) or here"
ENGINE_HELP = f"where the model runs: local (transformers, here) or ndif ({NDIF_HELP})"
HEAD_HELP = "with --engine ndif: also bring back the attention row of head L.H (repeatable)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The trace command's options for this engine: ``ndif`` joins ``--engine``'s choices
    where another engine's options defined it already, else ``--engine`` is added here."""
    engine = p._option_string_actions.get("--engine")
    if engine is None:
        p.add_argument("--engine", choices=("local", "ndif"), default="local", help=ENGINE_HELP)
    elif engine.choices is not None and "ndif" not in engine.choices:
        engine.choices = (*engine.choices, "ndif")
        engine.help = f"{engine.help}; ndif: {NDIF_HELP}"
    p.add_argument("--open-head", action="append", default=[], metavar="L.H", help=HEAD_HELP)
    p.add_argument(
        "--full-logits", action="store_true",
        help="with --engine ndif: bring back the whole distribution each step (default: top-N)",
    )  # fmt: skip


def is_local(spec: str | None) -> bool:
    """True for the bundled model, a folder or a .gguf file: run with remote="local"."""
    if spec is None:
        return True
    path = os.path.expanduser(spec)
    return os.path.isdir(path) or path.endswith(".gguf") or os.path.isfile(path)


def parse_heads(specs: list[str]) -> tuple[tuple[int, int], ...]:
    """``L.H`` strings as (layer, head) pairs; a malformed one is one line."""
    heads = []
    for spec in specs:
        layer, _, head = spec.partition(".")
        if not (layer.isdigit() and head.isdigit()):
            raise LensError(f"--open-head wants LAYER.HEAD (e.g. 3.1); got {spec!r}")
        heads.append((int(layer), int(head)))
    return tuple(heads)


def open_engine(args: argparse.Namespace, say: Any) -> Any:
    """The NDIF engine the options name (the key is read before anything is fetched)."""
    from llm_lens.core.engines.ndif import NdifEngine, api_key

    if is_local(args.model):
        from llm_lens.core.loading import load_model

        doing(f"loading the model {args.model or 'bundled'}")
        return NdifEngine.local(load_model(args.model, args.device, args.dtype, say))
    key = api_key()
    doing(f"reading {args.model}'s configuration for NDIF")
    return NdifEngine.hosted(args.model, key)


def check_heads(engine: Any, heads: tuple[tuple[int, int], ...]) -> None:
    info = engine.info
    for layer, head in heads:
        if layer >= info.num_layers or head >= info.num_heads:
            raise LensError(
                f"--open-head {layer}.{head}: {info.name} has {info.num_layers} layers "
                f"of {info.num_heads} heads"
            )


def run_settings(args: argparse.Namespace) -> tuple[Any, Any]:
    """The sampling options and the run's length and stops, as the local trace reads them."""
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY, SamplingParams

    params = GREEDY if args.greedy else SamplingParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
        repetition_penalty=args.repetition_penalty, seed=args.seed,
    )  # fmt: skip
    return params, RunConfig(max_new_tokens=args.max_new_tokens, stop_strings=tuple(args.stop))


def ndif_trace(args: argparse.Namespace) -> dict[str, Any]:
    """Run as the options say on the NDIF engine; the trace as JSON-able data."""
    from dataclasses import replace

    from llm_lens.core.exports.trace import PARAM_FIELDS, model_dict, trace_dict

    params, config = run_settings(args)

    for name in UNSUPPORTED:
        if getattr(args, name, None):
            raise LensError(f"--{name.rstrip('s')} is not supported with --engine ndif yet")
    heads = parse_heads(args.open_head)
    say = (lambda _f, _m: None) if args.quiet else (lambda _f, m: print(m, file=sys.stderr))
    engine = open_engine(args, say)
    check_heads(engine, heads)
    prompt = engine.tokenize(args.prompt, chat=not args.raw, parse_special=args.parse_special)
    spec = replace(engine.spec, heads=heads, full_logits=args.full_logits, top_n=config.top_n)
    report = None if args.quiet else (lambda s: print(f"ndif: {s.state.lower()}", file=sys.stderr))
    doing(f"generating with {engine.info.name} on {engine.source}")
    run = engine.start(prompt, params, config, spec=spec, on_status=report)
    run.run_all()
    if not args.quiet:
        print(run.summary().output_text, file=sys.stderr)
    data = trace_dict(
        model_dict(engine.info), prompt, {f: getattr(params, f) for f in PARAM_FIELDS},
        run.steps, run.lenses, run.finish_reason,
    )  # fmt: skip
    return data | {"engine": engine_entry(engine, run)}


def engine_entry(engine: Any, run: Any) -> dict[str, Any]:
    """The trace's ``engine``: the engine's identity and what it provides (where
    :mod:`llm_lens.core.engines.base` is present), and the run's own record."""
    try:
        record = engine.identity.as_dict() | {"provides": engine.provides.as_dict()}
    except ImportError:  # the engine protocol is not in this tree
        record = {"name": "ndif", "model": engine.info.name, "url": None}
    out: dict[str, Any] = record | run.engine_record()
    return out
