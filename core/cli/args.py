"""What every headless command shares: an argument parser whose mistakes are one line, and the
guard that turns an error into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from llm_lens.core.errors import LensError


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake raises :class:`LensError` instead of printing a block."""

    def error(self, message: str) -> NoReturn:
        raise LensError(message)


def guarded(command: str, body: Callable[[], int]) -> int:
    """Run one command: a user mistake (:class:`LensError`, an unreadable or unwritable file) is
    one line on stderr and exit status 2; ``--help`` exits 0."""
    try:
        return body()
    except (LensError, OSError) as exc:
        print(f"llm-lens {command}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
