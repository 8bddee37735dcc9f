"""A generated block of README.md between two marker comments: its table rows, and the text with
the block's lines replaced (the families table and the families sweep each write one)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ReadmeBlock:
    start: str  # the opening marker comment, as written in README.md
    end: str  # the closing one

    def rows(self, text: str) -> dict[str, str]:
        """The block's table rows by their first cell (the line as written; header skipped)."""
        block = text.split(self.start, 1)[1].split(self.end, 1)[0]
        rows = [line for line in block.splitlines() if line.startswith("| ")][1:]
        return {line.split("|")[1].strip(): line for line in rows}

    def replace(self, text: str, lines: Sequence[str]) -> str:
        """``text`` with the block's lines replaced by ``lines`` (markers kept)."""
        if self.start not in text or self.end not in text:
            raise SystemExit(f"README.md has no block between {self.start!r} and {self.end!r}")
        head, rest = text.split(self.start, 1)
        _, tail = rest.split(self.end, 1)
        return head + self.start + "\n" + "\n".join(lines) + "\n" + self.end + tail
