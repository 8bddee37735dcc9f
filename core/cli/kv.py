"""``llm-lens kv``: the KV-cache size a model's ``config.json`` implies, without the weights."""

from __future__ import annotations

import argparse

from llm_lens.core.cli.args import Parser, guarded
from llm_lens.core.fileio import strict_json
from llm_lens.core.kvcache import (
    DEFAULT_TOKENS,
    MAX_COUNT,
    build_report,
    format_report,
    layout_from_config,
    load_config,
)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    shown = text if len(text) <= 40 else f"{text[:20]}… ({len(text)} characters)"
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {shown!r}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most 2**53, got {shown!r}")
    return value


def _parser() -> Parser:
    parser = Parser(prog="llm-lens kv", description="KV-cache size from a model's config.json.")
    parser.add_argument("--config", required=True, help="config.json, its folder, or a hub id")
    parser.add_argument(
        "--tokens",
        type=_positive_int,
        help=f"tokens cached (default: the context length, else {DEFAULT_TOKENS})",
    )
    parser.add_argument("--batch", type=_positive_int, default=1, help="sequences (default 1)")
    parser.add_argument("--dtype", help="cache dtype (default: the config's, else float16)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def _run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    tokens = args.tokens
    if tokens is None:
        tokens = layout_from_config(cfg).context_length or DEFAULT_TOKENS
    report = build_report(args.config, cfg, tokens, args.batch, args.dtype)
    print(strict_json(report, indent=2) if args.json else format_report(report))
    return 0


def main(argv: list[str]) -> int:
    """``llm-lens kv``: print the KV-cache report."""
    return guarded("kv", lambda: _run(_parser().parse_args(argv)))
