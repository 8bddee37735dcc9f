"""The README's notebook lines run as written, and print what the run recorded."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _block() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- notebook:[^>]*-->\n```python\n(.*?)```", text, re.DOTALL)
    assert match, "README lost its notebook block"
    return match.group(1)


def test_the_readme_notebook_block_runs(loaded, monkeypatch):
    import llm_lens
    from llm_lens.core import loading

    code = _block()
    assert len(code.strip().splitlines()) <= 10
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: loaded)  # the same model, once
    out = io.StringIO()
    scope: dict[str, object] = {}
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), scope)  # noqa: S102
    lines = out.getvalue().splitlines()
    run = scope["run"]
    assert len(run.steps) == 8 and len(lines) == 9  # one line a step, then the text
    assert lines[-1] == run.output_text()
    first = run.steps[0]
    assert lines[0].endswith(f"p={first.prob:.2f} rank={first.rank} top: " + ", ".join(
        f"{t!r} {p:.0%}" for t, p in zip(first.top_texts[:3], first.top_probs[:3], strict=True)
    ))  # fmt: skip
    assert set(llm_lens.__all__) <= set(dir(llm_lens))
