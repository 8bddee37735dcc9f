"""The zip container: hostile and damaged files refused with one clear line, nothing unpickled."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_lens.core.sessions.format import SessionError
from llm_lens.core.sessions.read import load_session
from tests.core.sessions.helpers import rewrite

ROOT = Path(__file__).resolve().parents[3]


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


# ---- the container on its own: hand-built zips -------------------------------------------------


def npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def hand_zip(path: Path, manifest: Any, members: dict[str, bytes]) -> Path:
    """A zip written member by member with zipfile, never through save_session."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_a_hand_built_zip_reads_back_every_array_exactly(tmp_path):
    from llm_lens.core.sessions.container import open_zip, read_arrays, read_manifest

    arrays = {
        "a.npy": np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
        "codes.npy": np.array([0, 7, 255], np.uint8),
        "fortran.npy": np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
        "big_endian.npy": np.array([1.5, -2.25, 1e30], dtype=">f4"),
        "empty.npy": np.zeros((0, 5), np.int32),
    }
    entries = {n: {"dtype": a.dtype.name, "shape": list(a.shape)} for n, a in arrays.items()}
    manifest = {"format": "llm-lens-session/2", "arrays": entries, "note": "kept"}
    path = hand_zip(
        tmp_path / "hand.llmlens", manifest, {n: npy_bytes(a) for n, a in arrays.items()}
    )
    with open_zip(path) as zf:
        got_manifest = read_manifest(zf)
        got = read_arrays(zf, got_manifest)
    assert got_manifest == manifest
    assert set(got) == set(arrays)
    for name, want in arrays.items():
        assert got[name].dtype == want.dtype.newbyteorder("=") and got[name].dtype.isnative, name
        assert got[name].shape == want.shape and np.array_equal(got[name], want), name


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"/etc/passwd": b"x"}, "unsafe member name '/etc/passwd'"),
        ({"C:evil.npy": b"x"}, "unsafe member name 'C:evil.npy'"),
        ({"runs/../../up.npy": b"x"}, "unsafe member name"),
        ({"runs\\..\\up.npy": b"x"}, "unsafe member name"),
    ],
)
def test_open_zip_refuses_unsafe_member_names(tmp_path, members, message):
    from llm_lens.core.sessions.container import open_zip

    path = hand_zip(tmp_path / "bad.llmlens", {"format": "llm-lens-session/3"}, members)
    with pytest.raises(SessionError, match=re.escape(message)):
        open_zip(path)


def test_open_zip_refuses_a_member_written_twice_and_a_folder(tmp_path):
    from llm_lens.core.sessions.container import open_zip

    path = tmp_path / "twice.llmlens"
    with zipfile.ZipFile(path, "w") as z, pytest.warns(UserWarning, match="Duplicate name"):
        z.writestr("a.npy", b"first")
        z.writestr("a.npy", b"second")
    with pytest.raises(SessionError, match="the member 'a.npy' appears twice"):
        open_zip(path)
    with pytest.raises(SessionError, match="not a regular file"):
        open_zip(tmp_path)
    ok = hand_zip(tmp_path / "ok.llmlens", {"format": "llm-lens-session/3"}, {"a.npy": b"x"})
    with open_zip(ok) as zf:  # control: the same zip without the second copy opens
        assert zf.namelist() == ["manifest.json", "a.npy"]


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ([1, 2], "manifest.json is not an object"),
        ({"format": "llm-lens-session/0"}, "format 'llm-lens-session/0'"),
        ({"format": 3}, "format 3"),
        ({"format": "llm-lens-session/3"}, "the manifest lists no arrays"),
        ({"format": "llm-lens-session/3", "arrays": {"x.npy": {"dtype": "float32"}}},
         "array x.npy: bad shape None"),
        ({"format": "llm-lens-session/3",
          "arrays": {"x.npy": {"dtype": "int32", "shape": [2, True]}}}, "bad shape"),
    ],
)  # fmt: skip
def test_read_manifest_and_arrays_refuse_what_they_cannot_trust(tmp_path, manifest, message):
    from llm_lens.core.sessions.container import open_zip, read_arrays, read_manifest

    path = hand_zip(tmp_path / "m.llmlens", manifest, {"x.npy": npy_bytes(np.zeros(2, np.int32))})
    with open_zip(path) as zf, pytest.raises(SessionError, match=re.escape(message)):
        read_arrays(zf, read_manifest(zf))
