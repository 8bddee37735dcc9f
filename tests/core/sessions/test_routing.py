"""Mixture-of-experts routing in a session file: kept exactly, absent for a dense model,
a damaged entry one clear line."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.core.test_experts import moe_engine


def test_session_keeps_the_routing(tokenizer: Any, tmp_path: Any) -> None:
    import json
    import zipfile

    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY
    from llm_lens.core.sessions.format import Session, SessionError, session_from_run
    from llm_lens.core.sessions.read import read_session
    from llm_lens.core.sessions.write import save_session

    engine = moe_engine(tokenizer)
    run = engine.start(engine.tokenize("One two three", chat=False), GREEDY, RunConfig(3))
    run.run_all()
    path = tmp_path / "moe.llmlens"
    save_session(path, Session(engine.info.as_dict(), (session_from_run(run, engine.info),)))
    back = read_session(path).runs[0].steps
    for live, read in zip(run.steps, back, strict=True):
        a, b = live.routing, read.routing
        assert a is not None and b is not None
        assert (b.first_position, b.scoring, b.rows) == (a.first_position, a.scoring, a.rows)
        np.testing.assert_array_equal(b.layers, a.layers)
        np.testing.assert_array_equal(b.experts, a.experts)
        np.testing.assert_array_equal(b.weights, a.weights)  # float32: as the block used them
        np.testing.assert_allclose(b.probs, a.probs, rtol=1e-3, atol=1e-4)  # float16 on disk
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    entry = manifest["runs"][0]["routing"]
    assert entry["rows"] == [len(run.prompt), 1, 1] and entry["layers"] == [0, 1, 2]

    entry["rows"] = [len(run.prompt), 1]  # a damaged file: one clear line, no traceback
    bad = tmp_path / "bad.llmlens"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, json.dumps(manifest) if item.filename == "manifest.json" else data)
    with pytest.raises(SessionError, match="routing: rows do not match the steps"):
        read_session(bad)


def test_dense_session_has_no_routing_entry(tokenizer: Any, tmp_path: Any) -> None:
    import json
    import zipfile

    from llm_lens.core.loop.engine import Engine, RunConfig
    from llm_lens.core.sampling import GREEDY
    from llm_lens.core.sessions.format import Session, session_from_run
    from llm_lens.core.sessions.read import read_session
    from llm_lens.core.sessions.write import save_session
    from tests.conftest import make_tiny

    engine = Engine(make_tiny(tokenizer))
    run = engine.start(engine.tokenize("Hi", chat=False), GREEDY, RunConfig(2))
    run.run_all()
    path = tmp_path / "dense.llmlens"
    save_session(path, Session(engine.info.as_dict(), (session_from_run(run, engine.info),)))
    with zipfile.ZipFile(path) as zf:
        assert "routing" not in json.loads(zf.read("manifest.json"))["runs"][0]
    assert all(s.routing is None for s in read_session(path).runs[0].steps)
