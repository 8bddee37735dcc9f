"""Session files: a lossless round trip, an atomic save, hostile files refused, ``inspect``.

The round trip uses the real 8-token greedy run; branches and ragged layouts use the tiny Llama.
"""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from llm_lens.core.cli.inspect import main as main_inspect
from llm_lens.core.cli.inspect import write_trace_session
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.records import StepRecord
from llm_lens.core.sampling import GREEDY, SamplingParams, restage
from llm_lens.core.sessions.compact import (
    decode_weights,
    encode_weights,
    from_lower_triangle,
    kept_ids,
    lower_triangle,
    rebuild_logits,
    tail_histogram,
    weight_error_bound,
)
from llm_lens.core.sessions.format import (
    PARTS,
    Session,
    SessionError,
    SessionRun,
    session_from_run,
)
from llm_lens.core.sessions.read import load_session
from llm_lens.core.sessions.views import prompt_attention_maps
from llm_lens.core.sessions.write import estimate_size, save_session

from .session_v2 import write_format_2

ROOT = Path(__file__).resolve().parents[2]
HALF = {  # stored as float16; compact fields (format 3) are checked by assert_compact_step
    ("PrefillCapture", "hidden"),
}
COMPACT = ("logits", "attention", "hidden", "attn_update", "norms", "tail_levels")


def assert_compact_step(a: Any, b: Any, where: str) -> None:
    """Format 3's step fields against the live step, within the documented bounds."""
    kept = kept_ids(a)
    assert b.tail_levels == a.logits.size - kept.size > 0, where  # said, for the Sampling pane
    assert np.array_equal(b.logits[a.top_ids], a.logits[a.top_ids]), where  # exact top N
    np.testing.assert_allclose(b.logits[kept], a.logits[kept], rtol=1e-3, err_msg=where)
    lse = [float(np.logaddexp.reduce(np.asarray(x.logits, np.float64))) for x in (a, b)]
    assert abs(lse[0] - lse[1]) < 2e-3, where  # the tail's mass is kept
    assert b.attention.shape == a.attention.shape, where
    assert np.all(np.abs(b.attention - a.attention) <= weight_error_bound(a.attention) + 1e-7)
    assert b.hidden.shape == (a.hidden.shape[0], 0) and b.attn_update.shape[1] == 0, where
    np.testing.assert_allclose(b.norms, a.norm_table(), rtol=1e-6, err_msg=where)
    for name in ("residual_norms", "attn_norms", "mlp_norms", "update_norms"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-5, atol=1e-5)


def assert_same(a: Any, b: Any, where: str = "", half: bool = False) -> None:
    """Equal field by field: arrays exactly (or within float16 rounding), and read-only."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and not b.flags.writeable, where
        assert (b.dtype, b.shape) == (a.dtype, a.shape), where
        if half:
            np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-7, err_msg=where)
        else:
            assert np.array_equal(a, b), where
    elif isinstance(a, StepRecord) and b.norms is not None and a.norms is None:
        assert_compact_step(a, b, where)
        same = {f: getattr(b, f) for f in COMPACT}
        assert_same(dataclasses.replace(a, **same), b, where)
    elif isinstance(a, SessionRun) and a.prompt_attention is not None:
        assert (
            b.prompt_attention is not None and b.prompt_attention.shape == a.prompt_attention.shape
        )
        bound = weight_error_bound(a.prompt_attention) + 1e-7
        assert np.all(np.abs(b.prompt_attention - a.prompt_attention) <= bound), where
        for f in dataclasses.fields(a):
            if f.name != "prompt_attention":
                assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}", half)
    elif dataclasses.is_dataclass(a):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            flag = half or (type(a).__name__, f.name) in HALF
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}", flag)
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]", half)
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def greedy_session(greedy_run, engine) -> Session:
    maps = prompt_attention_maps(greedy_run)
    run = session_from_run(greedy_run, engine.info, label="greedy", prompt_attention=maps)
    return Session(model=engine.info.as_dict(), runs=(run,))


@pytest.fixture(scope="module")
def saved(tmp_path_factory, greedy_session) -> Path:
    path = tmp_path_factory.mktemp("session") / "greedy.llmlens"
    assert save_session(path, greedy_session) == path.stat().st_size
    return path


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


def test_tail_histogram_keeps_the_mass_and_each_value_within_its_bin():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, 5000).astype(np.float32)
    logits[7] = 60.0  # far above the rest
    logits[100:140] -= 80  # far below: the last bin
    step = SimpleNamespace(logits=logits, context_ids=np.array([3, 9]), top_ids=np.arange(5),
                           token=SimpleNamespace(id=11))  # fmt: skip
    kept = kept_ids(step)
    assert {3, 9, 11, 7, *range(5)} <= set(kept.tolist()) and len(kept) <= 256 + 8
    counts, lse = tail_histogram(logits, kept)
    back = rebuild_logits(logits.size, kept, logits[kept], counts, lse)
    assert np.array_equal(back[kept], logits[kept])
    tail = np.setdiff1d(np.arange(logits.size), kept)
    lse_true = np.logaddexp.reduce(logits[tail].astype(np.float64))
    assert abs(np.logaddexp.reduce(back[tail].astype(np.float64)) - lse_true) < 1e-4
    # each bin's tokens stay within that bin's range of true values (not the last bin)
    top = logits[tail].max()
    assert back[tail].max() <= top + 1e-5 and back[tail].min() >= logits[tail].min() - 1e-5
    with pytest.raises(ValueError, match="counts"):
        rebuild_logits(logits.size, kept, logits[kept], counts + 1, lse)


def test_attention_codes_stay_within_their_bound():
    w = np.linspace(0, 1, 100001, dtype=np.float32)
    back = decode_weights(encode_weights(w))
    assert np.all(np.abs(back - w) <= weight_error_bound(w) + 1e-7)
    assert np.abs(back - w).max() <= 0.004 and np.abs(back - w)[w <= 0.01].max() <= 4.1e-4
    maps = np.tril(np.random.default_rng(1).random((2, 3, 5, 5), dtype=np.float32))
    assert np.array_equal(from_lower_triangle(lower_triangle(maps), 5), maps)


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


def test_prompt_attention_maps_match_the_prefill(greedy_run, engine):
    maps = prompt_attention_maps(greedy_run)
    t = len(greedy_run.prompt)
    assert maps.shape == (30, 9, t, t)
    np.testing.assert_allclose(maps[:, :, -1, :], greedy_run.steps[0].attention, atol=1e-5)
    np.testing.assert_allclose(maps.sum(axis=-1), 1.0, atol=1e-5)
    assert not np.triu(maps, k=1).any()  # causal: no query attends to a later key
    with pytest.raises(ValueError, match="prompt attention"):
        session_from_run(greedy_run, engine.info, prompt_attention=maps[:, :, :5, :5])
    too_long = SimpleNamespace(prompt=[0] * 257)
    one_layer = SimpleNamespace(num_layers=1, num_heads=1)
    with pytest.raises(ValueError, match="T ≤ 256"):
        session_from_run(too_long, one_layer, prompt_attention=np.zeros((1, 1, 257, 257)))


def test_estimate_size_counts_each_part(saved, greedy_session, greedy_run):
    sizes = estimate_size(greedy_session)
    assert all(sizes[p] > 0 for p in PARTS) and sizes["total"] == sum(sizes[p] for p in PARTS)
    t = len(greedy_run.prompt)
    # float32 norms per step and the float16 prompt states, stored as they are
    assert sizes["hidden"] == 8 * 4 * 31 * 4 + 31 * t * 576 * 2 + 2 * 240
    size = saved.stat().st_size
    assert abs(sizes["total"] - size) <= 0.1 * size  # the estimate is within 10 %
    with_vectors = estimate_size(greedy_session, vectors=True)
    assert with_vectors["hidden"] - sizes["hidden"] == 8 * (31 + 30) * 576 * 2 + 2 * 240


def test_write_trace_session(tmp_path, greedy_run, engine):
    path = tmp_path / "trace.llmlens"
    assert write_trace_session(greedy_run, engine.info, path) == path.stat().st_size
    run = load_session(path).runs[0]
    t = len(greedy_run.prompt)
    assert run.prompt_attention.shape == (30, 9, t, t) and len(run.steps) == 8


@pytest.mark.parametrize(
    "error", [OSError(errno.ENOSPC, "No space left on device"), RuntimeError("boom")]
)
def test_failed_save_leaves_the_previous_file_and_no_temp(
    tmp_path, monkeypatch, saved, greedy_session, error
):
    path = tmp_path / "s.llmlens"
    shutil.copy(saved, path)
    before = path.read_bytes()
    real_save, calls = np.save, []

    def failing_save(file: Any, array: Any, **kw: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise error
        real_save(file, array, **kw)

    monkeypatch.setattr(np, "save", failing_save)
    expected = SessionError if isinstance(error, OSError) else RuntimeError
    with pytest.raises(expected, match="No space left|boom"):
        save_session(path, greedy_session)
    assert len(calls) == 3
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["s.llmlens"]


def test_save_keeps_an_existing_files_mode(tmp_path, greedy_session):
    path = tmp_path / "s.llmlens"
    save_session(path, greedy_session)
    assert path.stat().st_mode & 0o777 == 0o644
    path.chmod(0o600)
    save_session(path, greedy_session)
    assert path.stat().st_mode & 0o777 == 0o600


def test_save_into_a_missing_folder_is_a_session_error(tmp_path, greedy_session):
    with pytest.raises(SessionError, match="cannot write"):
        save_session(tmp_path / "no" / "such.llmlens", greedy_session)


# ---- Hostile and damaged files ----------------------------------------------------------------


class Payload:
    """Unpickling this creates ``marker``: proof that a file's pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.marker,))


def pickled_npy(marker: Path) -> bytes:
    out = io.BytesIO()
    np.save(out, np.array([Payload(marker)], dtype=object), allow_pickle=True)
    return out.getvalue()


def rewrite(
    src: Path,
    dst: Path,
    edit: Any = None,
    members: dict[str, bytes] | None = None,
    drop: tuple[str, ...] = (),
    stored: bool = False,
) -> Path:
    """Copy a session zip, editing the manifest (a function) and replacing or adding members."""
    members = dict(members or {})
    with (
        zipfile.ZipFile(src) as zin,
        zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED) as zout,
    ):
        for name in zin.namelist():
            data = members.pop(name, None) or zin.read(name)
            if name == "manifest.json" and edit is not None:
                manifest = json.loads(data)
                edit(manifest)
                data = json.dumps(manifest).encode()
            if name not in drop:
                zout.writestr(name, data)
        for name, data in members.items():
            zout.writestr(zipfile.ZipInfo(name), data)
    return dst


def flip_byte(path: Path, member: str) -> Path:
    """Flip one byte in the middle of ``member``'s stored data, leaving the zip readable."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    raw = bytearray(path.read_bytes())
    start = info.header_offset  # local header: 30 bytes, then the name and the extra field
    name_len = int.from_bytes(raw[start + 26 : start + 28], "little")
    extra_len = int.from_bytes(raw[start + 28 : start + 30], "little")
    raw[start + 30 + name_len + extra_len + info.compress_size // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    return path


def read_member(path: Path, name: str) -> bytes:
    with zipfile.ZipFile(path) as z:
        return z.read(name)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _arrays(edit: Any) -> Any:
    return lambda m: edit(m["arrays"])


def _set(table: dict[str, Any], key: str, value: Any) -> None:
    table[key] = value


LOGITS = "runs/0/tail_lse.npy"  # float32 (steps, 64), stored
BAD_FILES: dict[str, tuple[Any, str]] = {
    "random bytes": (
        lambda good, p: write(p, np.random.default_rng(0).bytes(5000)),
        r"not an LLM Lens session \(not a zip file\)",
    ),
    "empty": (lambda good, p: write(p, b""), "not a zip file"),
    "truncated": (lambda good, p: write(p, good.read_bytes()[:50_000]), "truncated"),
    "truncated tail": (lambda good, p: write(p, good.read_bytes()[:-10]), "truncated"),
    "no manifest": (lambda good, p: rewrite(good, p, drop=("manifest.json",)), "no manifest.json"),
    "manifest not json": (
        lambda good, p: rewrite(good, p, members={"manifest.json": b"{nope"}),
        "not JSON",
    ),
    "foreign format": (
        lambda good, p: rewrite(good, p, lambda m: _set(m, "format", "other/1")),
        "not an LLM Lens session",
    ),
    "newer version": (
        lambda good, p: rewrite(good, p, lambda m: _set(m, "format", "llm-lens-session/4")),
        r"made by a newer LLM Lens \(format 4\); this version reads format 3",
    ),
    "huge shape": (
        lambda good, p: rewrite(good, p, _arrays(lambda a: _set(a[LOGITS], "shape", [10**9, 64]))),
        "too large: array runs/0/tail_lse.npy",
    ),
    "huge total": (
        lambda good, p: rewrite(
            good, p, _arrays(lambda a: [_set(a[n], "shape", [2 * 10**8]) for n in a])
        ),
        "too large: arrays need",
    ),
    "member smaller than its shape": (
        lambda good, p: rewrite(good, p, _arrays(lambda a: _set(a[LOGITS], "shape", [8, 50000]))),
        "the member holds",
    ),
    "header disagrees": (
        lambda good, p: rewrite(good, p, _arrays(lambda a: _set(a[LOGITS], "shape", [64, 8]))),
        r"\.npy header says",
    ),
    "trailing bytes": (
        lambda good, p: rewrite(good, p, members={LOGITS: read_member(good, LOGITS) + b"junk"}),
        "does not match its shape",
    ),
    "missing member": (lambda good, p: rewrite(good, p, drop=(LOGITS,)), "missing"),
    "path traversal": (
        lambda good, p: rewrite(good, p, members={"../evil.npy": b"x"}),
        "unsafe member name '../evil.npy'",
    ),
    "flipped byte, stored": (
        lambda good, p: flip_byte(rewrite(good, p, stored=True), LOGITS),
        r"array runs/0/tail_lse.npy is damaged \(Bad CRC-32",
    ),
    "flipped byte, deflated": (
        lambda good, p: flip_byte(Path(shutil.copy(good, p)), "runs/0/attention.npy"),
        "array runs/0/attention.npy is damaged",
    ),
    "unknown layout": (
        lambda good, p: rewrite(
            good, p, lambda m: _set(m["runs"][0]["arrays"]["attention"], "layout", "odd")
        ),
        "unknown layout 'odd'",
    ),
    "steps do not match arrays": (
        lambda good, p: rewrite(good, p, lambda m: m["runs"][0]["steps"].pop()),
        "do not match the steps",
    ),
    "a timing flag that is not true or false": (
        lambda good, p: rewrite(
            good, p, lambda m: _set(m["runs"][0]["steps"][0]["timing"], "waits_measured", "yes")
        ),
        r"runs\[0\]\.steps\[0\]\.timing\.waits_measured must be true or false",
    ),
    "a negative wait": (
        lambda good, p: rewrite(
            good, p, lambda m: _set(m["runs"][0]["steps"][0]["timing"], "queue_ms", -1.0)
        ),
        r"runs\[0\]\.steps\[0\]\.timing\.queue_ms must be a finite number",
    ),
    "malformed step": (
        lambda good, p: rewrite(good, p, lambda m: m["runs"][0]["steps"][0].pop("token")),
        r"the manifest is invalid: runs\[0\]\.steps\[0\]\.token is missing",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_files_raise_one_clear_session_error(tmp_path, saved, case):
    make, message = BAD_FILES[case]
    path = make(saved, tmp_path / "bad.llmlens")
    with pytest.raises(SessionError, match=message) as caught:
        load_session(path)
    text = str(caught.value)
    assert text.startswith(str(path)) and "\n" not in text


@pytest.mark.parametrize("claimed", ["object", "uint8"])
def test_a_pickle_in_the_file_never_runs(tmp_path, saved, claimed):
    """Whether the manifest admits the object dtype or disguises it, nothing is unpickled."""
    marker = tmp_path / "marker"
    payload = pickled_npy(marker)
    header = len(payload) - len(payload.split(b"\n", 1)[1])  # magic + header, up to its newline
    shape = [1] if claimed == "object" else [len(payload) - header]
    path = rewrite(
        saved,
        tmp_path / "evil.llmlens",
        _arrays(lambda a: a.update({LOGITS: {"dtype": claimed, "shape": shape}})),
        members={LOGITS: payload},
    )
    message = "dtype 'object' is not allowed" if claimed == "object" else "header says object"
    with pytest.raises(SessionError, match=message):
        load_session(path)
    assert not marker.exists()
    # control: the payload is live, so the test above could fail
    np.load(io.BytesIO(pickled_npy(tmp_path / "control")), allow_pickle=True)
    assert (tmp_path / "control").exists()


# ---- inspect and the documented example --------------------------------------------------------


def test_inspect_prints_a_summary(saved, greedy_run, engine, capsys):
    assert main_inspect([str(saved)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    needles = [
        "SmolLM2-135M-Instruct",
        engine.info.weights_id,
        "8 steps",
        "finish length",
        greedy_run.output_text(),
        greedy_run.prompt.text,
        "on disk",
        "greedy",
        *(f"{part} " for part in PARTS),
    ]
    for needle in needles:
        assert needle in out, needle


@pytest.mark.parametrize("argv", [["random"], ["missing.llmlens"], []])
def test_inspect_a_bad_file_is_one_line_and_status_2(tmp_path, capsys, argv):
    if argv == ["random"]:
        argv = [str(tmp_path / "random.llmlens")]
        Path(argv[0]).write_bytes(b"\x00garbage" * 50)
    assert main_inspect(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("llm-lens inspect: error: ")


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


def test_recorded_analysis_answers_like_the_model(greedy_run, engine, tmp_path):
    """A reopened session answers the panes' requests with what the model computed."""
    from llm_lens.core import attention, layers
    from llm_lens.core.positions import position_view
    from llm_lens.core.sessions.views import RecordedAnalysis, recorded_run

    path = tmp_path / "rec.llmlens"
    save_session(path, Session(model=engine.info.as_dict(), runs=(recorded_run(greedy_run),)))
    recorded = RecordedAnalysis(load_session(path).runs[0])
    for step in (0, 3):
        live = layers.logit_lens(engine, greedy_run.steps[step], 5)
        got = recorded.get("lens", {"step": step, "k": 5})
        assert np.array_equal(got.top_ids, live.top_ids) and got.top_texts == live.top_texts
        # the file keeps the residual stream as float16: the lens agrees to that rounding
        np.testing.assert_allclose(got.top_probs, live.top_probs, rtol=2e-3, atol=1e-3)
    live_map = attention.attention_map(
        engine, greedy_run.cache, greedy_run.prefill.hidden, 4, 2, max_size=256
    )
    got_map = recorded.get("attention_map", {"layer": 4, "head": 2, "max_size": 256})
    bound = weight_error_bound(live_map.weights) + 1e-5  # uint8 codes of √w on disk
    assert np.all(np.abs(got_map.weights - live_map.weights) <= bound)
    live_pl = layers.prompt_lens(engine, greedy_run.prefill.hidden)
    assert np.array_equal(recorded.get("prompt_lens", {}).top1_ids, live_pl.top1_ids)
    proj = recorded.get("embedding_projection", {})
    assert proj.coords.shape == (engine.info.vocab_size, 2)
    assert recorded.get("neighbours", {"token_id": 5}) is None  # needs the model
    assert recorded.get("attention_overview", {}).shape == (30, 9, 32, 32)
    t = len(greedy_run.prompt)
    live_pos = position_view(engine.model, t).rope[0]
    got_pos = recorded.get("positions", {"positions": t}).rope[0]
    assert got_pos.layers == tuple(range(30)) and got_pos.theta == live_pos.theta
    # float16 on disk (format 2)
    np.testing.assert_allclose(got_pos.angles, live_pos.angles, rtol=2e-3, atol=5e-3)
    np.testing.assert_allclose(got_pos.inv_freq, live_pos.inv_freq, rtol=2e-3)
    assert recorded.get("positions", {"positions": t + 1}) is None  # another prompt length


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


def test_vectors_are_kept_when_asked(tmp_path, greedy_session, greedy_run):
    path = tmp_path / "v.llmlens"
    save_session(path, greedy_session, vectors=True)
    step = load_session(path).runs[0].steps[2]
    assert step.norms is None and step.hidden.shape == greedy_run.steps[2].hidden.shape
    np.testing.assert_allclose(step.hidden, greedy_run.steps[2].hidden, rtol=1e-3, atol=1e-3)


def test_save_reports_progress_and_a_cancel_leaves_the_previous_file(tmp_path, greedy_session):
    from llm_lens.core.sessions.write import SaveCancelled

    path = tmp_path / "s.llmlens"
    path.write_bytes(b"previous")
    calls: list[tuple[int, int]] = []

    def cancel_third(done: int, total: int) -> bool:
        calls.append((done, total))
        return len(calls) < 3

    with pytest.raises(SaveCancelled, match="cancelled"):
        save_session(path, greedy_session, cancel_third)
    assert path.read_bytes() == b"previous" and os.listdir(tmp_path) == ["s.llmlens"]
    assert len(calls) == 3 and calls[0][0] < calls[1][0] < calls[2][0] < calls[2][1]
    calls.clear()
    save_session(path, greedy_session, lambda done, total: calls.append((done, total)))
    assert calls[-1][0] == calls[-1][1] and load_session(path).runs[0].label == "greedy"


def test_runs_sharing_a_prefill_store_it_once(tmp_path, greedy_session):
    run = greedy_session.runs[0]
    twin = dataclasses.replace(run, run_id=run.run_id + 1, label="twin")
    path = tmp_path / "two.llmlens"
    save_session(path, Session(greedy_session.model, (run, twin)))
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        names = z.namelist()
    first, second = manifest["runs"]
    assert second["prefill"]["hidden"] == first["prefill"]["hidden"] == "runs/0/prefill_hidden.npy"
    assert second["prompt_attention"] == first["prompt_attention"]
    assert not any(n.startswith("runs/1/prefill") or n == "runs/1/prompt_attention.npy"
                   for n in names)  # fmt: skip
    a, b = load_session(path).runs
    assert_same(a.prefill, b.prefill, "prefill")
    assert np.array_equal(a.prompt_attention, b.prompt_attention) and b.label == "twin"


def test_explanations_are_kept_and_shown_without_the_model(tmp_path, tiny_engine):
    """ "Why this token?" results computed before saving come back exactly from the file."""
    from llm_lens.core.explain.attribution import explain
    from llm_lens.core.sessions.explained import with_explanations
    from llm_lens.core.sessions.views import RecordedAnalysis

    eng = tiny_engine
    run = eng.start(eng.tokenize("Hello there", chat=False), GREEDY, RunConfig(max_new_tokens=3))
    run.run_all()
    live = {(1, None): explain(eng, run.steps[1]), (2, 7): explain(eng, run.steps[2], 7)}
    saved_run = with_explanations(session_from_run(run, eng.info), live)
    path = tmp_path / "why.llmlens"
    save_session(path, Session(eng.info.as_dict(), (saved_run,)))
    recorded = RecordedAnalysis(load_session(path).runs[0])
    for (step, vs), want in live.items():
        got = recorded.get("explain", {"step": step, "vs": vs})
        assert_same(want, got, f"explain {step} {vs}")  # float32 as computed, exactly
    assert recorded.get("explain", {"step": 0, "vs": None}) is None  # never computed
    # re-saving a reopened run with one more keeps the first ones
    more = with_explanations(recorded.run, {(0, None): explain(eng, run.steps[0])})
    save_session(path, Session(eng.info.as_dict(), (more,)))
    again = RecordedAnalysis(load_session(path).runs[0])
    assert all(
        again.get("explain", {"step": s, "vs": v}) is not None for s, v in [*live, (0, None)]
    )
    assert_same(live[(2, 7)], again.get("explain", {"step": 2, "vs": 7}), "kept")


def test_half_precision_only_where_every_value_fits_and_members_hash_their_content():
    from llm_lens.core.sessions.write import _half_or_full, _Pool

    fits = np.array([[-65000.0, 3.0], [0.5, 65000.0]], np.float32)
    assert _half_or_full([fits, np.zeros((0, 3), np.float32)]) == "float16"
    for bad in (70000.0, -70000.0, np.nan):
        assert _half_or_full([fits, np.array([1.0, bad], np.float32)]) == "float32"
    pool = _Pool()
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    first = pool.add("a.npy", "other", "float32", base)
    assert pool.add("b.npy", "other", "float32", base.copy()) == first  # equal content: shared
    assert pool.add("c.npy", "other", "float32", base[:, ::2]) == "c.npy"  # a strided view
    assert pool.add("d.npy", "other", "float32", np.ascontiguousarray(base[:, ::2])) == "c.npy"
    assert pool.add("e.npy", "other", "float32", base + 1) == "e.npy"
