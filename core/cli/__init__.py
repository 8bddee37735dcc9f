"""The headless commands (no Qt is imported here): ``trace`` runs the loop and writes a JSON
trace, ``compare`` runs several samplers from one prefill, ``inspect`` summarises a session
file, ``kv`` computes KV-cache sizes from a config, ``explain`` says why a step chose its
token, ``patch`` maps where a clean prompt's answer lives (activation patching), ``steer``
writes a steering vector from two sets of prompts.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = ("trace", "kv", "inspect", "compare", "explain", "patch", "steer")


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv`` (starting with the command's name) to that command's module."""
    from llm_lens.core.cli.args import guarded

    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = argv[0], argv[1:]

    def dispatch() -> int:  # each command guards itself; this catches a failing import too
        module = importlib.import_module(f"llm_lens.core.cli.{command}")
        return int(module.main(rest))

    return guarded(command, dispatch)
