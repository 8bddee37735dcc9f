"""The session file format as documented: the notebook example reads a saved file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from llm_lens.core.sessions.compact import weight_error_bound

ROOT = Path(__file__).resolve().parents[3]


def test_the_documented_notebook_example_runs(saved, greedy_run, capsys):
    doc = (ROOT / "docs" / "session-format.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    imports = set(re.findall(r"^(?:import|from) ([\w., ]+)", code, re.M))
    assert imports == {"io, json, zipfile", "numpy as np"}
    namespace: dict[str, Any] = {}
    exec(code.replace('"session.llmlens"', repr(str(saved))), namespace)
    t = len(greedy_run.prompt)
    want = greedy_run.steps[5]
    assert np.array_equal(namespace["top_ids"][5], want.top_ids)
    assert np.array_equal(namespace["top_logits"][5], want.top_logits)  # exact
    assert [a.shape for a in namespace["attention"]] == [(30, 9, t + i) for i in range(8)]
    got = namespace["attention"][5]
    assert np.all(np.abs(got - want.attention) <= weight_error_bound(want.attention) + 1e-6)
    np.testing.assert_allclose(namespace["norms"][5][0], want.residual_norms, rtol=1e-6)
    assert namespace["tokens"] == [s.token.text for s in greedy_run.steps]
    assert "SmolLM2-135M-Instruct" in capsys.readouterr().out
