"""Reading sessions: a lossless round trip, loading without the model or torch, older formats.

The round trip uses the real 8-token greedy run; branches and ragged layouts use the tiny Llama.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import GREEDY, SamplingParams, restage
from llm_lens.core.sessions.format import Session, session_from_run
from llm_lens.core.sessions.read import load_session
from llm_lens.core.sessions.write import save_session
from tests.core.session_v2 import write_format_2
from tests.core.sessions.helpers import assert_same, rewrite

ROOT = Path(__file__).resolve().parents[3]


def test_round_trip_keeps_every_field(saved, greedy_session, greedy_run, engine):
    loaded = load_session(saved)
    assert loaded.model == engine.info.as_dict()
    assert loaded.model["weights_id"] == engine.info.weights_id != ""
    assert (loaded.created, loaded.app_version) == (
        greedy_session.created,
        greedy_session.app_version,
    )
    [run] = loaded.runs
    assert (run.run_id, run.label, run.parent) == (greedy_run.run_id, "greedy", None)
    assert (run.finish_reason, run.params) == ("length", dataclasses.asdict(GREEDY))
    assert run.prompt == greedy_run.prompt and len(run.steps) == 8
    for a, b in zip(greedy_run.steps, run.steps, strict=True):
        assert_same(a, b, f"step {a.index}")
        assert np.array_equal(b.logits[a.top_ids], a.logits[a.top_ids])  # exact where it counts
    assert_same(greedy_run.prefill, run.prefill, "prefill")
    assert_same(greedy_session.runs[0], run, "run")
    assert run.output_text() == greedy_run.output_text()
    with zipfile.ZipFile(saved) as z:
        manifest = json.loads(z.read("manifest.json"))
    arrays = manifest["arrays"]
    assert manifest["format"] == "llm-lens-session/3"
    assert arrays["runs/0/tail_counts.npy"] == {"dtype": "int32", "shape": [8, 64],
                                                "part": "logits"}  # fmt: skip
    assert arrays["runs/0/attention.npy"]["dtype"] == "uint8"
    assert arrays["runs/0/norms.npy"]["shape"] == [8, 4, 31]
    assert "runs/0/hidden.npy" not in arrays and "runs/0/logits.npy" not in arrays


def test_loaded_steps_resample_to_the_same_tokens(saved, greedy_run):
    """Re-sampling needs only the saved logits and context: the greedy choice comes back."""
    for step in load_session(saved).runs[0].steps:
        logits, context = np.array(step.logits), np.array(step.context_ids)  # torch wants writable
        raw = restage(logits, context, GREEDY, top_n=1)[0]
        assert int(raw.top_ids[0]) == step.token.id


def test_loading_needs_neither_the_model_nor_torch(saved, greedy_run):
    code = (
        "import json, sys\n"
        "sys.modules['torch'] = None  # any import of torch now fails\n"
        "from llm_lens.core.sessions.read import load_session\n"
        "from llm_lens.core.cli.inspect import main as main_inspect\n"
        "run = load_session(sys.argv[1]).runs[0]\n"
        "assert main_inspect([sys.argv[1]]) == 0\n"
        "s = run.steps[3]\n"
        "print(json.dumps([len(run.steps), float(s.logits[s.top_ids].sum()), run.output_text()]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(saved)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    steps, total, text = json.loads(out.stdout.splitlines()[-1])
    assert (steps, text) == (8, greedy_run.output_text())
    step = greedy_run.steps[3]
    assert total == float(step.logits[step.top_ids].sum())


def test_branches_and_ragged_layouts_round_trip(tmp_path, tiny_engine):
    eng = tiny_engine
    prompt = eng.tokenize("Hello there", chat=False)
    sampled = SamplingParams(
        temperature=0.8, top_k=20, top_p=0.9, min_p=0.01, repetition_penalty=1.3, seed=3
    )
    root = eng.start(prompt, sampled, RunConfig(max_new_tokens=5))
    one = eng.start(prompt, GREEDY, RunConfig(max_new_tokens=1))
    empty = eng.start(prompt, GREEDY)  # never iterated: no steps, no prefill
    root.run_all(), one.run_all()
    assert len(root.steps[0].stages) == 6  # raw + five active stages
    runs = (
        session_from_run(root, eng.info, label="sampled"),
        session_from_run(one, eng.info, label="branch", parent=(root.run_id, 2)),
        session_from_run(empty, eng.info),
    )
    path = tmp_path / "three.llmlens"
    save_session(path, Session(eng.info.as_dict(), runs))
    loaded = load_session(path)
    assert [r.label for r in loaded.runs] == ["sampled", "branch", f"run {empty.run_id}"]
    assert loaded.runs[1].parent == (root.run_id, 2) and loaded.runs[2].steps == ()
    assert loaded.runs[0].params == dataclasses.asdict(sampled)
    for a, b in zip(runs, loaded.runs, strict=True):
        assert_same(a, b, a.label)
    with zipfile.ZipFile(path) as z:
        fields = [r["arrays"] for r in json.loads(z.read("manifest.json"))["runs"]]
    layouts = {k: fields[0][k]["layout"] for k in ("tail_lse", "attention", "context_ids")}
    assert layouts == {"tail_lse": "stacked", "attention": "concat", "context_ids": "prefix"}
    assert fields[1]["attention"]["layout"] == "stacked" and fields[2] == {}


def as_format_1(src: Path, dst: Path) -> Path:
    """A format-1 file of the same runs: float32 where format 1 kept float32, int64 ids."""
    with zipfile.ZipFile(src) as z:
        manifest = json.loads(z.read("manifest.json"))
        members = {}
        for name, entry in manifest["arrays"].items():
            array = np.load(io.BytesIO(z.read(name)), allow_pickle=False)
            wide = "int64" if array.dtype.kind == "i" else "float32"
            if array.dtype.kind in "if" and not name.endswith(
                ("attention.npy", "prefill_hidden.npy")
            ):
                array, entry["dtype"] = array.astype(wide), wide
            out = io.BytesIO()
            np.save(out, array, allow_pickle=False)
            members[name] = out.getvalue()
    manifest["format"] = "llm-lens-session/1"
    with zipfile.ZipFile(dst, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for name, data in members.items():
            z.writestr(name, data)
    return dst


def test_whether_the_waits_were_measured_is_kept_and_older_files_read_as_measured(
    tmp_path, saved, greedy_run
):
    """A step's ``waits_measured`` is written; a file from before it reads as measured, as its
    waits always were shown."""
    flags = [s.timing.waits_measured for s in greedy_run.steps]
    assert [s.timing.waits_measured for s in load_session(saved).runs[0].steps] == flags

    def unmeasured(m: dict[str, Any]) -> None:
        for step in m["runs"][0]["steps"]:
            step["timing"]["waits_measured"] = False

    def older(m: dict[str, Any]) -> None:
        for step in m["runs"][0]["steps"]:
            del step["timing"]["waits_measured"]

    off = load_session(rewrite(saved, tmp_path / "off.llmlens", unmeasured)).runs[0].steps
    assert not any(s.timing.waits_measured for s in off)
    old = load_session(rewrite(saved, tmp_path / "old.llmlens", older)).runs[0].steps
    assert all(s.timing.waits_measured for s in old)
    assert [s.timing.wait_ms for s in old] == [s.timing.wait_ms for s in greedy_run.steps]


def test_version_1_and_2_files_still_read(tmp_path, greedy_session, greedy_run):
    v2 = write_format_2(tmp_path / "v2.llmlens", greedy_session)
    two = load_session(v2)
    with zipfile.ZipFile(v2) as z:
        assert json.loads(z.read("manifest.json"))["format"] == "llm-lens-session/2"
    assert two.runs[0].steps[0].norms is None  # format 2 keeps the vectors
    for a, b in zip(greedy_run.steps, two.runs[0].steps, strict=True):
        np.testing.assert_allclose(b.logits, a.logits, rtol=1e-3, atol=1e-7)  # float16
        np.testing.assert_allclose(b.hidden, a.hidden, rtol=1e-3, atol=1e-3)
        assert np.array_equal(b.logits[a.top_ids], a.logits[a.top_ids])
    one = load_session(as_format_1(v2, tmp_path / "v1.llmlens"))
    with zipfile.ZipFile(tmp_path / "v1.llmlens") as z:
        manifest = json.loads(z.read("manifest.json"))
    assert manifest["arrays"]["runs/0/logits.npy"]["dtype"] == "float32"
    assert_same(two.runs[0], one.runs[0], "run")
