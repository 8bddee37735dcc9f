"""Session files from anyone: a catalogue of mutations of one good file (tiny Llama, two compared
runs with recorded views), each refused with one clear line, before anything is built.

In process every case is one :class:`SessionError` line; ``llm-lens inspect`` (a subprocess,
bounded by a timeout) exits 2 with one line and no traceback for a sample of them and for a FIFO.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.sampling import SamplingParams
from llm_lens.core.sessions.format import Session, SessionComparison, SessionError
from llm_lens.core.sessions.read import load_session
from llm_lens.core.sessions.write import save_session

BIG = "__1e400__"  # replaced by the JSON literal 1e400 (json.dumps cannot write it)


@pytest.fixture(scope="module")
def good(tmp_path_factory, tiny_engine) -> Path:
    from llm_lens.core.runs.compare import samples
    from llm_lens.core.sessions.views import recorded_run

    prompt = tiny_engine.tokenize("Once upon a time", chat=True)
    comp = samples(tiny_engine, prompt, SamplingParams(temperature=1.2), 2, 5,
                   RunConfig(max_new_tokens=4))  # fmt: skip
    memo: dict[Any, Any] = {}
    runs = tuple(recorded_run(r, memo=memo) for r in comp.runs)
    session = Session(tiny_engine.info.as_dict(), runs,
                      comparisons=(SessionComparison((0, 1), comp.shared_prefill_ms),))  # fmt: skip
    path = tmp_path_factory.mktemp("hostile") / "good.llmlens"
    save_session(path, session)
    return path


def mutate(
    src: Path,
    dst: Path,
    edit: Callable[[dict[str, Any]], Any] | None = None,
    members: dict[str, bytes] | None = None,
    extra: tuple[tuple[str, bytes], ...] = (),
) -> Path:
    """Copy a session zip with its manifest edited, members replaced, and members appended
    (``extra`` may repeat a name: zipfile writes a duplicate with a warning)."""
    members = dict(members or {})
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for name in zin.namelist():
            data = members.pop(name, None) or zin.read(name)
            if name == "manifest.json" and edit is not None:
                manifest = json.loads(data)
                edit(manifest)
                data = json.dumps(manifest).replace(f'"{BIG}"', "1e400").encode()
            zout.writestr(name, data)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Duplicate name"
            for name, data in extra:
                zout.writestr(name, data)
    return dst


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def run0(m: dict[str, Any]) -> dict[str, Any]:
    return m["runs"][0]


def step(m: dict[str, Any], i: int = 1) -> dict[str, Any]:
    return m["runs"][0]["steps"][i]


def put(table: Any, key: Any, value: Any) -> None:
    table[key] = value


def one_d_prompt_attention(good: Path, dst: Path) -> Path:
    m = json.loads(zipfile.ZipFile(good).read("manifest.json"))
    name = run0(m)["prompt_attention"]
    flat = np.zeros(7, np.uint8)  # format 3: uint8 codes
    return mutate(good, dst, lambda m: put(m["arrays"][name], "shape", [7]),
                  members={name: npy(flat)})  # fmt: skip


# name -> (make(good, dst), what the one line says)
CASES: dict[str, tuple[Callable[[Path, Path], Path], str]] = {
    "Infinity as layer count": (
        lambda g, p: mutate(g, p, lambda m: put(m["model"], "num_layers", math.inf)),
        r"model\.num_layers must be an integer, not inf",
    ),
    "1e400 as vocabulary size": (
        lambda g, p: mutate(g, p, lambda m: put(m["model"], "vocab_size", BIG)),
        r"model\.vocab_size must be an integer, not inf",
    ),
    "1e400 as a token id": (
        lambda g, p: mutate(g, p, lambda m: put(step(m)["token"], "id", BIG)),
        r"runs\[0\]\.steps\[1\]\.token\.id must be an integer",
    ),
    "Infinity as kv tokens": (
        lambda g, p: mutate(g, p, lambda m: put(step(m)["kv"], "tokens", math.inf)),
        r"kv\.tokens must be an integer",
    ),
    "prob is a string": (
        lambda g, p: mutate(g, p, lambda m: put(step(m), "prob", "0.5")),
        r"steps\[1\]\.prob must be a number, not '0\.5'",
    ),
    "prob is NaN": (
        lambda g, p: mutate(g, p, lambda m: put(step(m), "prob", math.nan)),
        r"steps\[1\]\.prob must be a finite number",
    ),
    "prob above one": (
        lambda g, p: mutate(g, p, lambda m: put(step(m), "prob", 1.5)),
        r"steps\[1\]\.prob must be a finite number in \[0, 1\]",
    ),
    "negative kv tokens": (
        lambda g, p: mutate(g, p, lambda m: put(step(m)["kv"], "tokens", -3)),
        r"kv\.tokens must be between 0",
    ),
    "negative timing": (
        lambda g, p: mutate(g, p, lambda m: put(step(m)["timing"], "forward_ms", -1.0)),
        r"timing\.forward_ms must be a finite number",
    ),
    "positive logprob": (
        lambda g, p: mutate(g, p, lambda m: put(step(m), "logprob", 0.5)),
        r"steps\[1\]\.logprob must be a finite number",
    ),
    "rank is a float": (
        lambda g, p: mutate(g, p, lambda m: put(step(m), "rank", 1.5)),
        r"steps\[1\]\.rank must be an integer",
    ),
    "step index out of order": (
        lambda g, p: mutate(g, p, lambda m: put(step(m), "index", 3)),
        r"steps\[1\]\.index must be between 1 and 1",
    ),
    "token id beyond the vocabulary": (
        lambda g, p: mutate(g, p, lambda m: put(run0(m)["prompt"]["tokens"][0], "id", 10**9)),
        r"prompt\.tokens\[0\]\.id must be between 0 and",
    ),
    "token bytes not hex": (
        lambda g, p: mutate(g, p, lambda m: put(step(m)["token"], "raw", "zz")),
        r"token\.raw must be hexadecimal bytes",
    ),
    "special is a string": (
        lambda g, p: mutate(g, p, lambda m: put(step(m)["token"], "special", "no")),
        r"token\.special must be true or false",
    ),
    "top text is a number": (
        lambda g, p: mutate(g, p, lambda m: put(step(m)["top_texts"], 0, 7)),
        r"top_texts\[0\] must be a string, not 7",
    ),
    "stage kept is negative": (
        lambda g, p: mutate(g, p, lambda m: put(step(m)["stages"][0], "kept", -1)),
        r"stages\[0\]\.kept must be between 0",
    ),
    "no runs": (
        lambda g, p: mutate(g, p, lambda m: put(m, "runs", [])),
        r"the file holds no runs",
    ),
    "runs is an object": (
        lambda g, p: mutate(g, p, lambda m: put(m, "runs", {"0": 1})),
        r"runs must be a list, not dict",
    ),
    "model field missing": (
        lambda g, p: mutate(g, p, lambda m: m["model"].pop("hidden_size")),
        r"model\.hidden_size is missing",
    ),
    "model is a list": (
        lambda g, p: mutate(g, p, lambda m: put(m, "model", [1, 2])),
        r"model must be an object, not list",
    ),
    "layer count disagrees with the arrays": (
        lambda g, p: mutate(g, p, lambda m: put(m["model"], "num_layers", 3)),
        r"the arrays disagree with the model: run 0 step 0 attention has shape \(2, 4, \d+\)",
    ),
    "hidden size disagrees with the arrays": (
        lambda g, p: mutate(g, p, lambda m: put(m["model"], "hidden_size", 65)),
        r"the arrays disagree with the model: run 0 prefill hidden has shape \(3, \d+, 64\)",
    ),
    "vocabulary disagrees with the arrays": (
        lambda g, p: mutate(g, p, lambda m: put(m["model"], "vocab_size", 60000)),
        r"run 0 step 0 logits has shape \(\d+,\), expected \(60000,\)",
    ),
    "1-D prompt attention": (
        one_d_prompt_attention,
        r"prompt attention has shape \(7,\), expected \(layers, heads",
    ),
    "shown out of range": (
        lambda g, p: mutate(g, p, lambda m: put(m, "shown", 9)),
        r"shown must be between -1 and 1, not 9",
    ),
    "comparison names a missing run": (
        lambda g, p: mutate(g, p, lambda m: put(m["comparisons"][0], "runs", [0, 5])),
        r"comparisons\[0\]\.runs\[1\] must be between 0 and 1",
    ),
    "parent is not a pair": (
        lambda g, p: mutate(g, p, lambda m: put(run0(m), "parent", [1])),
        r"runs\[0\]\.parent must be \[run_id, step\]",
    ),
    "empty prompt": (
        lambda g, p: mutate(g, p, lambda m: put(run0(m)["prompt"], "tokens", [])),
        r"runs\[0\]\.prompt\.tokens is empty",
    ),
    "seed of 1e30": (
        lambda g, p: mutate(g, p, lambda m: put(run0(m)["params"], "seed", 1e30)),
        r"params\.seed must be an integer",
    ),
    "temperature is Infinity": (
        lambda g, p: mutate(g, p, lambda m: put(run0(m)["params"], "temperature", math.inf)),
        r"params\.temperature must be a finite number",
    ),
    "lens texts are not lists": (
        lambda g, p: mutate(g, p, lambda m: put(run0(m)["extras_json"], "lens_top_texts", 5)),
        r"extras_json\.lens_top_texts must be a list",
    ),
    "lens texts miss a step": (
        lambda g, p: mutate(g, p, lambda m: run0(m)["extras_json"]["lens_top_texts"].pop()),
        r"lens texts do not match",
    ),
    "duplicate manifest": (
        lambda g, p: mutate(g, p, extra=(("manifest.json", b'{"format": "x"}'),)),
        r"the member 'manifest\.json' appears twice",
    ),
    "duplicate array": (
        lambda g, p: mutate(g, p, extra=(("runs/0/logits.npy", npy(np.zeros(3))),)),
        r"the member 'runs/0/logits\.npy' appears twice",
    ),
    "manifest is a list": (
        lambda g, p: mutate(g, p, members={"manifest.json": b"[1, 2]"}),
        r"manifest\.json is not an object",
    ),
}


def one_line(text: str) -> bool:
    return len(text.strip().splitlines()) == 1 and "Traceback" not in text


@pytest.mark.parametrize("case", list(CASES))
def test_a_mutated_file_is_one_session_error_line(tmp_path, good, case):
    make, message = CASES[case]
    path = make(good, tmp_path / "bad.llmlens")
    with pytest.raises(SessionError, match=message) as caught:
        load_session(path)
    assert str(caught.value).startswith(str(path)) and one_line(str(caught.value))


def test_the_good_file_reads(good):
    session = load_session(good)
    assert len(session.runs) == 2 and session.comparisons[0].runs == (0, 1)


def inspect(path: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from llm_lens.core.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "inspect", str(path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


INSPECTED = ["Infinity as layer count", "prob is a string", "no runs", "duplicate manifest",
             "1-D prompt attention"]  # fmt: skip


def test_inspect_exits_2_with_one_line_never_a_traceback_or_a_hang(tmp_path, good):
    paths = [CASES[c][0](good, tmp_path / f"{i}.llmlens") for i, c in enumerate(INSPECTED)]
    fifo = tmp_path / "x.llmlens"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer for ever
    for path, case in [*zip(paths, INSPECTED, strict=True), (fifo, "FIFO")]:
        done = inspect(path)
        assert done.returncode == 2, (case, done.stderr)
        assert done.stdout == "" and one_line(done.stderr), (case, done.stderr)
        assert done.stderr.startswith("llm-lens inspect: error: ")
    assert "not a regular file" in done.stderr


def test_a_fifo_or_a_folder_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "x.llmlens"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(SessionError, match="not a regular file"):
            load_session(path)
