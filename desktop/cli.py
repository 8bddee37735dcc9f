"""The ``llm-lens`` entry point: headless sub-commands go to ``core.cli`` (no Qt is imported);
anything else opens the window.
"""

from __future__ import annotations

import argparse
import sys


def gui_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llm-lens",
        description="Watch a language model turn a prompt into a response, step by step. "
        "Headless: llm-lens trace PROMPT … | llm-lens compare PROMPT --config … | "
        "llm-lens kv --config CONFIG … | llm-lens inspect FILE.llmlens",
    )
    p.add_argument("session", nargs="?", default=None, help="a .llmlens session file to open")
    p.add_argument("--model", default=None, help="folder, .gguf file or hub id (default: bundled)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "mps"))
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    p.add_argument("--prompt", default=None, help="prompt to show (and run with --selftest)")
    p.add_argument("--selftest", action="store_true", help="load, run a few tokens, check, exit")
    p.add_argument("--screenshot", default=None, metavar="PNG", help="with --selftest: save PNG")
    p.add_argument("--tokens", type=int, default=8, help="with --selftest: tokens to generate")
    p.add_argument("--window-size", default=None, metavar="WxH", help="e.g. 1920x1080")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from llm_lens.core.cli import COMMANDS

    if argv and argv[0] in COMMANDS:
        from llm_lens.core.cli import main as core_main

        return core_main(argv)
    args = gui_parser().parse_args(argv)
    from llm_lens.desktop.app import run_gui

    return run_gui(args)


if __name__ == "__main__":
    sys.exit(main())
