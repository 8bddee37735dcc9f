"""``llm-lens compare``: 2–4 sampling configurations run side by side from one shared prefill,
written as JSON (one ``llm-lens-trace/1`` trace per configuration plus the comparison's numbers).

``--intervene SPEC`` (repeatable, the grammar of ``llm-lens trace --intervene``) runs every column
under those changes; the JSON's ``interventions`` lists them, as does each trace. A configuration
is a comma-separated list of presets and ``key=value`` settings, applied left to
right over neutral settings (temperature 1, no top-k, top-p 1, min-p 0, no repetition penalty,
seed 0), so ``temperature=0.2`` changes the temperature and nothing else. No Qt is imported here.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict
from typing import Any

from llm_lens.core.cli.args import (
    Parser,
    add_placement,
    cancellable,
    cap_new_tokens,
    doing,
    guarded,
    token_count,
)
from llm_lens.core.cli.trace import (
    INTERVENE_HELP,
    OUT_HELP,
    PARSE_SPECIAL_HELP,
    PARTLY_RANDOM_HELP,
    RAW_HELP,
    check_inputs,
    load_engine,
)
from llm_lens.core.errors import SamplingError
from llm_lens.core.sampling import SamplingParams

SCHEMA = "llm-lens-compare/2"
NEUTRAL: dict[str, Any] = {
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "seed": 0,
    "greedy": False,
}
PRESETS: dict[str, dict[str, Any]] = {
    "factual": {"temperature": 0.2, "top_p": 0.95},
    "creative": {"temperature": 0.9, "top_p": 0.9},
    "wild": {"temperature": 1.2},
    "greedy": {"greedy": True, "temperature": 0.0},
}
KEYS: dict[str, type] = {
    "temperature": float,
    "top_k": int,
    "top_p": float,
    "min_p": float,
    "repetition_penalty": float,
    "seed": int,
}


def parse_config(spec: str) -> SamplingParams:
    """``"temperature=0.2,top_p=0.95,seed=1"``, ``"greedy"``, ``"creative,seed=3"`` → settings.

    Raises :class:`SamplingError` naming the bad part (unknown key or preset, not a number, out
    of range).
    """
    values = dict(NEUTRAL)
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        raise SamplingError(f"configuration {spec!r} is empty")
    for item in items:
        if "=" not in item:
            if item not in PRESETS:
                names = ", ".join(PRESETS)
                raise SamplingError(f"unknown preset {item!r} in {spec!r}: choose one of {names}")
            values.update(PRESETS[item])
            continue
        key, _, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if key not in KEYS:
            raise SamplingError(f"unknown key {key!r} in {spec!r}: choose from {', '.join(KEYS)}")
        try:
            values[key] = KEYS[key](raw.strip())
        except ValueError:
            kind = "a whole number" if KEYS[key] is int else "a number"
            raise SamplingError(f"{key} must be {kind}; got {raw.strip()!r}") from None
    return SamplingParams(**values)


def compare_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="llm-lens compare",
        description="Run 2–4 sampling configurations from one shared prefill; write JSON.",
    )
    p.add_argument("prompt")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="SPEC",
        help="e.g. 'temperature=0.2,top_p=0.95,seed=1' or a preset: factual, creative, greedy, "
        "wild (repeat 2–4 times)",
    )
    p.add_argument("--model", default=None, help="folder, .gguf file or hub id (default: bundled)")
    p.add_argument("--raw", action="store_true", help=RAW_HELP)
    p.add_argument("--parse-special", action="store_true", help=PARSE_SPECIAL_HELP)
    p.add_argument("--max-new-tokens", type=token_count, default=32)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    add_placement(p)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--out", default=None, help=OUT_HELP)
    p.add_argument(
        "--intervene", action="append", default=[], metavar="SPEC",
        help="change the model for every column (repeatable); " + INTERVENE_HELP.split(": ", 1)[1],
    )  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--allow-partly-random", action="store_true", help=PARTLY_RANDOM_HELP)
    return p


def parse_configs(specs: list[str]) -> list[SamplingParams]:
    from llm_lens.core.sampling import check_configs  # torch-free: mistakes fail fast

    check_configs(len(specs))
    return [parse_config(s) for s in specs]


def config_dict(spec: str, params: SamplingParams) -> dict[str, Any]:
    keys = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed")
    return {"spec": spec} | {k: getattr(params, k) for k in keys} | {"greedy": params.is_greedy}


def run_compare(args: argparse.Namespace) -> dict[str, Any]:
    """Load the model, run the comparison, return the JSON-able result."""
    from llm_lens.core.exports.trace import intervention_rows, model_dict, run_dict
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.runs.compare import compare

    configs = parse_configs(args.config)
    engine, prompt = load_engine(args)
    asked, context = args.max_new_tokens, engine.info.context_length
    new_tokens = cap_new_tokens(asked, len(prompt.ids), context)
    run_config = RunConfig(max_new_tokens=new_tokens, stop_strings=tuple(args.stop))
    changes = tuple(getattr(args, "interventions", None) or ())  # read by check_inputs
    per_column = [changes] * len(configs) if changes else []
    doing(f"comparing {len(configs)} configurations on {engine.info.name}")
    comparison, _cancel = cancellable(
        lambda c: compare(engine, prompt, configs, run_config, c, per_column)
    )
    if not args.quiet:
        for spec, run in zip(args.config, comparison.runs, strict=True):
            mark = ", intervened" if changes else ""
            print(f"[{spec}{mark}] {run.output_text()}", file=sys.stderr)
    return {
        "schema": SCHEMA,
        "model": model_dict(engine.info),
        "configs": [config_dict(s, p) for s, p in zip(args.config, configs, strict=True)],
        "interventions": intervention_rows(changes),
        "traces": [run_dict(engine, run) for run in comparison.runs],
        "columns": [asdict(c) for c in comparison.columns()],
        "divergence_step": comparison.divergence_step,
        "kl_per_step": comparison.kl_per_step,
        "overlap_per_step": comparison.overlap_per_step,
        "own_kl_per_step": _json_floats(comparison.own_kl_per_step),
        "own_overlap_per_step": _json_floats(comparison.own_overlap_per_step),
        "shared_prefill_ms": comparison.shared_prefill_ms,
        "prefill_saved_ms": comparison.prefill_saved_ms,
    }


def _json_floats(values: list[float]) -> list[float | None]:
    """NaN (a step only one column reached) as null: strict JSON has no NaN."""
    return [None if math.isnan(v) else v for v in values]


def main(argv: list[str]) -> int:
    """Entry of ``llm-lens compare`` (``argv`` without the word ``compare``)."""

    def body() -> int:
        args = compare_parser().parse_args(argv)
        parse_configs(args.config)  # refuse bad configurations before loading the model
        check_inputs(args)
        data = run_compare(args)
        from llm_lens.core.exports.trace import emit_json

        emit_json(data, args.out)
        return 0

    return guarded("compare", body)
