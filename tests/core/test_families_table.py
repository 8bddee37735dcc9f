"""The README's families table is what ``benchmarks/families_table.py`` writes, and the
head-sharing label every pane uses."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from llm_lens.core.records import head_sharing

ROOT = Path(__file__).resolve().parents[2]
LLAMA_ROWS = ("qwen2", "mixtral", "llama3")  # plain, mixture of experts, llama3 rope scaling


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("families_table", ROOT / "benchmarks" /
                                                  "families_table.py")  # fmt: skip
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_block_matches_the_script_for_llama_family_rows() -> None:
    table = _script()
    written = table.readme_rows(table.README.read_text(encoding="utf-8"))
    lines = table.markdown(table.build(LLAMA_ROWS))
    assert lines[0] == next(iter(_header(table)))
    for name, line in zip(LLAMA_ROWS, lines[2:], strict=True):
        assert written.get(name) == line, f"README row {name} is stale: run --write"
    assert "yes: top-2 of 4" in written["mixtral"] and "n/a: dense" in written["qwen2"]


def _header(table: ModuleType) -> list[str]:
    text = table.README.read_text(encoding="utf-8")
    block = text.split(table.START, 1)[1].split(table.END, 1)[0]
    return [line for line in block.splitlines() if line.startswith("| family |")]


def test_block_replaced_and_errors_one_line() -> None:
    table = _script()
    text = f"intro\n{table.START}\nold\n{table.END}\noutro\n"
    assert table.replace_block(text, ["| a |", "| b |"]) == (
        f"intro\n{table.START}\n| a |\n| b |\n{table.END}\noutro\n"
    )
    with pytest.raises(SystemExit):
        table.replace_block("no markers", ["x"])
    line = table.one_line(ValueError("a | b\nsecond line " + "x" * 200))
    assert line.startswith("error: ValueError: a \\| b") and "\n" not in line
    assert len(line) <= table.CELL + 1


@pytest.mark.parametrize(
    ("heads", "kv", "label"), [(9, 3, "GQA 9:3"), (8, 8, "MHA"), (71, 1, "MQA"), (4, 2, "GQA 4:2")]
)
def test_head_sharing(heads: int, kv: int, label: str) -> None:
    assert head_sharing(heads, kv) == label


def test_kv_cli_names_the_head_sharing() -> None:
    from llm_lens.core.kvcache import build_report, format_report

    base = dict(model_type="llama", num_hidden_layers=2, hidden_size=64, num_attention_heads=8,
                max_position_embeddings=64, torch_dtype="float16")  # fmt: skip
    for kv, label in ((8, "(MHA)"), (2, "(GQA 8:2)"), (1, "(MQA)")):
        text = format_report(build_report("m", {**base, "num_key_value_heads": kv}, 16, 1, None))
        assert f"{kv} KV heads {label}" in text
