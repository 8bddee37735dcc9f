"""The package layout holds: no import cycles between llm_lens's modules, counting imports
inside functions (import-linter's contracts check the direction between packages; a cycle
between two modules of one package, or one hidden in a function-level import, passes them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Run in a fresh interpreter whose working directory holds the tree laid out as installed (as
# `make static` does): this process has llm_lens imported through the editable install.
GRAPH = """
import json, grimp
g = grimp.build_graph("llm_lens", cache_dir=None, exclude_type_checking_imports=True)
packages = {m for m in g.modules if g.find_children(m)}
edges = {m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}
cycles = []
for module in sorted(g.modules - packages):
    for imported in edges[module]:
        chain = g.find_shortest_chain(importer=imported, imported=module)
        # a package's __init__ that re-exports its children is not a cycle of jobs
        if chain is not None and not packages.intersection(chain):
            cycles.append(" -> ".join((module, *chain)))
            break
print(json.dumps({"modules": len(g.modules), "edges": edges, "cycles": cycles}))
"""


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    layout = tmp_path_factory.mktemp("layout")
    (layout / "llm_lens").mkdir()
    shutil.copy(ROOT / "llm_lens" / "__init__.py", layout / "llm_lens" / "__init__.py")
    shutil.copytree(ROOT / "core", layout / "llm_lens" / "core")
    shutil.copytree(ROOT / "desktop", layout / "llm_lens" / "desktop")
    out = subprocess.run(
        [sys.executable, "-c", GRAPH], cwd=layout, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_no_module_imports_itself_back(graph: dict[str, object]) -> None:
    assert graph["cycles"] == []


def test_the_graph_is_the_whole_tree_with_imports_inside_functions(
    graph: dict[str, object],
) -> None:
    """The check sees every module, and counts a function-level import (the start-up imports
    the main window inside a function, so that --help does not load Qt)."""
    edges = graph["edges"]
    assert isinstance(edges, dict)
    assert len(edges) > 100
    assert "llm_lens.desktop.window.main_window" in edges["llm_lens.desktop.startup.app"]
