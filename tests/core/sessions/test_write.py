"""Writing sessions: size estimates, an atomic save, progress and cancel, shared arrays."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_lens.core.sessions.format import PARTS, Session, SessionError
from llm_lens.core.sessions.read import load_session
from llm_lens.core.sessions.write import estimate_size, save_session
from tests.core.sessions.helpers import assert_same

ROOT = Path(__file__).resolve().parents[3]


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
