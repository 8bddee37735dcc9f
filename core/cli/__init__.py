"""The headless commands (no Qt is imported here): ``trace`` runs the loop and writes a JSON
trace, ``compare`` runs several samplers from one prefill, ``inspect`` summarises a session
file, ``kv`` computes KV-cache sizes from a config, ``explain`` says why a step chose its
token.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = ("trace", "kv", "inspect", "compare", "explain")


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv`` (starting with the command's name) to that command's module."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = argv[0], argv[1:]
    module = importlib.import_module(f"llm_lens.core.cli.{command}")
    code: int = module.main(rest)
    return code
