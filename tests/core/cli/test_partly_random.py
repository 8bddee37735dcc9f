"""``--allow-partly-random`` on compare, explain and patch (as on trace): a tiny model whose file
lacks a weight its config needs (``model.norm.weight`` saved under another name) is refused in
one line naming it without the flag, and runs with it, the output saying "partly random"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_lens.core.cli import main
from tests.core.guards import builders as b


@pytest.fixture(scope="module")
def renamed(tokenizer: Any, tmp_path_factory: Any) -> Path:
    tmp = tmp_path_factory.mktemp("partly")
    base = b.tiny_folder(tmp / "base", tokenizer)
    return b.with_renamed_tensor(base, tmp / "renamed", "model.norm.weight", "model.final.weight")


def commands(folder: Path, out: Path) -> dict[str, list[str]]:
    common = ["--model", str(folder), "--device", "cpu", "--quiet", "--out", str(out)]
    return {
        "compare": ["compare", "Hi", "--config", "greedy", "--config", "wild",
                    "--max-new-tokens", "2", *common],
        "explain": ["explain", "Hi", "--step", "0", "--greedy", "--max-new-tokens", "1",
                    "--json", *common],
        "patch": ["patch", "The cat", "The dog", "--raw", "--metric", " Paris", " Rome", *common],
    }  # fmt: skip


@pytest.mark.parametrize("command", ["compare", "explain", "patch"])
def test_refused_in_one_line_without_the_flag(command, renamed, tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(commands(renamed, out)[command]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"llm-lens {command}: ")
    assert "1 weights missing from the files (model.norm.weight)" in err
    assert "--allow-partly-random" in err and not out.exists()


@pytest.mark.parametrize("command", ["compare", "explain", "patch"])
def test_runs_with_the_flag_and_says_partly_random(command, renamed, tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main([*commands(renamed, out)[command], "--allow-partly-random"]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    mark = data["model"]["partly_random"] if command == "compare" else data["partly_random"]
    assert mark.startswith("partly random: 1 weights missing") and "model.norm.weight" in mark
    warning = capsys.readouterr().err.strip()
    assert warning.startswith("llm-lens: warning: ") and "partly random" in warning


def test_a_partly_random_model_is_refused_on_disk_in_one_line(renamed, capsys):
    """accelerate reads disk-offloaded weights back from the checkpoint, where the random ones
    are not: refused at load, not a KeyError at the first forward."""
    argv = ["trace", "Hi", "--model", str(renamed), "--device", "cpu", "--greedy", "--quiet",
            "--allow-partly-random", "--max-memory", "cpu=1KiB", "--out", "-"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("llm-lens trace: error: ") and "cannot have layers on disk" in err
