"""The ``llm-lens`` entry point: headless sub-commands go to ``core.cli`` (no Qt is imported);
anything else opens the window.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

MAX_SIDE = 16384  # pixels: Qt's own limit on a widget's size is 16777215, screens far less


class GuiParser(argparse.ArgumentParser):
    """A usage mistake is one line on stderr and exit status 2 (not the usage block)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def window_size(text: str) -> tuple[int, int]:
    """``WxH`` (e.g. ``1920x1080``) as two whole numbers of pixels, each 1 to 16384."""
    width, sep, height = text.lower().partition("x")
    ok = all(part.strip().isdecimal() and len(part.strip()) <= 6 for part in (width, height))
    if not (sep and ok):
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT such as 1920x1080, got {text!r}")
    w, h = int(width), int(height)
    if not (0 < w <= MAX_SIDE and 0 < h <= MAX_SIDE):
        raise argparse.ArgumentTypeError(f"each side must be 1 to {MAX_SIDE} pixels, got {text!r}")
    return w, h


def gui_parser() -> argparse.ArgumentParser:
    p = GuiParser(
        prog="llm-lens",
        description="Watch a language model turn a prompt into a response, step by step. "
        "Headless: llm-lens trace PROMPT … | llm-lens compare PROMPT --config … | "
        "llm-lens kv --config CONFIG … | llm-lens inspect FILE.llmlens",
    )
    p.add_argument(
        "session", nargs="?", default=None, metavar="FILE",
        help="a .llmlens session file to open (with --selftest: the file checked; a model folder "
        "or .gguf file there is loaded as --model)",
    )  # fmt: skip
    p.add_argument("--model", default=None, help="folder, .gguf file or hub id (default: bundled)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "mps"))
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    p.add_argument("--prompt", default=None, help="prompt to show (and run with --selftest)")
    p.add_argument(
        "--selftest", action="store_true",
        help="load, run a few tokens (or show FILE's run), check every pane, exit",
    )  # fmt: skip
    p.add_argument("--screenshot", default=None, metavar="PNG", help="with --selftest: save PNG")
    p.add_argument(
        "--screenshots", default=None, metavar="DIR",
        help="with --selftest: after the checks, save each pane as DIR/<pane>.png",
    )  # fmt: skip
    p.add_argument("--tokens", type=int, default=8, help="with --selftest: tokens to generate")
    p.add_argument(
        "--window-size", type=window_size, default=None, metavar="WxH", help="e.g. 1920x1080"
    )
    from llm_lens.core.cli.args import add_placement
    from llm_lens.core.cli.trace import PARTLY_RANDOM_HELP

    add_placement(p)  # --device-map, --max-memory, --quantize: as the headless commands read them
    p.add_argument("--allow-partly-random", action="store_true", help=PARTLY_RANDOM_HELP)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from llm_lens.core.cli import COMMANDS

    if argv and argv[0] in COMMANDS:
        from llm_lens.core.cli import main as core_main

        return core_main(argv)
    args = gui_parser().parse_args(argv)
    from llm_lens.desktop.startup.app import run_gui

    return run_gui(args)


if __name__ == "__main__":
    sys.exit(main())
