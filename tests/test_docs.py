"""The docs a newcomer reads name the code as it is: docs/architecture.md's tree lists every
module of core/ and desktop/, and every ``core/….py`` or ``desktop/….py`` a doc names exists.

The tree is the fenced block under "## The tree". Each of its lines starts, at an indent of two
spaces per level, with one or more names (``x.py`` or ``x/``, several separated by one space),
then two spaces or more and the description; a line that does not (a description going on) is
skipped. A folder line sets the folder of the deeper lines below it, and names its package's
``__init__.py``. A module counts as named if the tree gives its path, or the page writes the
path out in full (``desktop/state/shown.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
HISTORIES = {"performance-history.md"}  # what the code was then, not what it is now
NAME = re.compile(r"[A-Za-z_]\w*(/[A-Za-z_]\w*)*(\.py|/)")
# a core/ or desktop/ file path, not the tail of a longer one (tests/core/test_x.py, llm_lens/…)
PATH = re.compile(r"(?<![\w/.-])(?:core|desktop)/[\w/]*\.py\b")
TEST_PATH = re.compile(r"(?<![\w/.-])tests/[\w/]*\.py\b")  # tests move with the code they test


def tree_block(text: str) -> list[str]:
    """The lines of the first fenced block after the heading "## The tree"."""
    after = text.split("\n## The tree\n", 1)
    assert len(after) == 2, "docs/architecture.md has no '## The tree' section"
    block = re.search(r"^```[^\n]*\n(.*?)^```", after[1], re.S | re.M)
    assert block is not None, "the tree section has no fenced block"
    return block.group(1).splitlines()


def tree_paths(lines: list[str]) -> set[str]:
    """Every path the tree names: files by their path, folders with a trailing '/', and each
    named folder's ``__init__.py``."""
    folders: list[str] = []
    paths: set[str] = set()
    for line in lines:
        content = line.lstrip(" ")
        indent = len(line) - len(content)
        if not content or indent % 2 or indent // 2 > len(folders):
            continue  # blank, or a description going on
        names = re.split(r"\s{2,}", content, maxsplit=1)[0].split(" ")
        if not all(NAME.fullmatch(name) for name in names):
            continue
        depth = indent // 2
        del folders[depth:]
        prefix = "".join(folders)
        for name in names:
            paths.add(prefix + name)
            if name.endswith("/"):
                paths.add(f"{prefix}{name}__init__.py")
        last = names[-1]
        if last.endswith("/"):
            folders.append(last)
    return paths


def modules() -> list[str]:
    """Every module under core/ and desktop/, as a path from the repository root."""
    found = [p for top in ("core", "desktop") for p in (ROOT / top).rglob("*.py")]
    return sorted(p.relative_to(ROOT).as_posix() for p in found if "__pycache__" not in p.parts)


def unnamed(text: str, wanted: list[str]) -> list[str]:
    """The modules of ``wanted`` that the page ``text`` names neither in its tree nor in full."""
    named = tree_paths(tree_block(text)) | set(PATH.findall(text))
    return [module for module in wanted if module not in named]


def docs() -> list[Path]:
    pages = sorted((ROOT / "docs").glob("*.md"))
    return [p for p in pages if p.name not in HISTORIES] + [ROOT / "README.md"]


def test_the_architecture_names_every_module() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert len(modules()) > 100  # the walk found the tree
    assert unnamed(text, modules()) == []


def test_a_module_left_out_of_the_tree_is_found() -> None:
    """The check fails on a missing module: drop a module's line from the tree (one the prose
    does not write out in full) and that module is reported; a module the page never heard of
    is reported too."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    lines, ours = tree_block(text), set(modules()) - set(PATH.findall(text))
    whole = tree_paths(lines)
    for line in lines:
        gone = whole - tree_paths([other for other in lines if other is not line])
        if len(gone) == 1 and gone <= ours:
            break
    else:
        pytest.fail("no tree line names one module alone")
    assert unnamed(text.replace(line + "\n", "", 1), modules()) == sorted(gone)
    fake = "desktop/state/not_written_yet.py"
    assert unnamed(text, [*modules(), fake]) == [fake]


def test_the_tree_reads_folders_and_several_names_on_a_line() -> None:
    lines = [
        "core/                   the pipeline",
        "  tokens.py             1 text → ids",
        "                          a description going on: core/x.py",
        "  cards/                cards",
        "    timing.py attribution.py  two cards",
        "    tokens.py embeddings.py",
        "desktop/                the app",
        "  __main__.py           python -m",
    ]
    assert tree_paths(lines) == {
        "core/", "core/__init__.py", "core/tokens.py",
        "core/cards/", "core/cards/__init__.py", "core/cards/timing.py",
        "core/cards/attribution.py", "core/cards/tokens.py", "core/cards/embeddings.py",
        "desktop/", "desktop/__init__.py", "desktop/__main__.py",
    }  # fmt: skip


def test_the_tree_names_nothing_that_is_gone() -> None:
    """Every file or folder the tree gives under core/ or desktop/ exists."""
    paths = tree_paths(tree_block(ARCHITECTURE.read_text(encoding="utf-8")))
    ours = [p for p in paths if p.startswith(("core/", "desktop/"))]
    assert len(ours) > 100
    assert [p for p in sorted(ours) if not (ROOT / p).exists()] == []


@pytest.mark.parametrize("page", docs(), ids=lambda p: p.name)
def test_every_path_a_doc_names_exists(page: Path) -> None:
    named = sorted(set(PATH.findall(page.read_text(encoding="utf-8"))))
    assert [p for p in named if not (ROOT / p).is_file()] == []


@pytest.mark.parametrize("page", docs(), ids=lambda p: p.name)
def test_every_test_file_a_doc_names_exists(page: Path) -> None:
    named = sorted(set(TEST_PATH.findall(page.read_text(encoding="utf-8"))))
    assert [p for p in named if not (ROOT / p).is_file()] == []


def test_a_moved_path_is_found() -> None:
    text = "the worker (`desktop/worker.py`) and `tests/core/test_x.py`, `llm_lens/core/a.py`"
    assert PATH.findall(text) == ["desktop/worker.py"]
    assert TEST_PATH.findall(text) == ["tests/core/test_x.py"]
