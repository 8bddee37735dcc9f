"""The zip container of a ``.llmlens`` file, read safely: a regular file only, no unsafe or
duplicate member names, a manifest of bounded size and known format, and every array's declared
size checked against the limits, its member and its ``.npy`` header before it is read (never
unpickled). What the arrays mean is :mod:`~llm_lens.core.sessions.read`'s business.
"""

from __future__ import annotations

import json
import math
import stat
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib import format as npformat

from llm_lens.core.sessions.format import (
    DTYPES,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    SessionError,
    check_limits,
)


def open_zip(path: Path) -> zipfile.ZipFile:
    if not stat.S_ISREG(path.stat().st_mode):  # a FIFO or device would block or never end
        raise SessionError("not a regular file")
    with path.open("rb") as f:
        head = f.read(4)
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        if head == b"PK\x03\x04":
            raise SessionError("the file is truncated or damaged (no zip directory)") from None
        raise SessionError("not an LLM Lens session (not a zip file)") from None
    names = zf.namelist()
    bad = [n for n in names if _unsafe_name(n)]
    if bad:
        zf.close()
        raise SessionError(f"not an LLM Lens session: unsafe member name {bad[0]!r}")
    seen: set[str] = set()
    twice = next((n for n in names if n in seen or seen.add(n)), None)  # type: ignore[func-returns-value]
    if twice is not None:  # other zip readers take the first copy, Python's the last
        zf.close()
        raise SessionError(f"not an LLM Lens session: the member {twice!r} appears twice")
    return zf


def _unsafe_name(name: str) -> bool:
    parts = name.replace("\\", "/").split("/")
    return not name or name.startswith("/") or ":" in name or ".." in parts


def read_manifest(zf: zipfile.ZipFile) -> dict[str, Any]:
    try:
        info = zf.getinfo(MANIFEST)
    except KeyError:
        raise SessionError("not an LLM Lens session (the zip has no manifest.json)") from None
    if info.file_size > MAX_MANIFEST_BYTES:
        raise SessionError(f"too large: manifest.json is {info.file_size:,} bytes")
    with zf.open(info) as f:
        raw = f.read(MAX_MANIFEST_BYTES + 1)
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise SessionError("not an LLM Lens session (manifest.json is not JSON)") from None
    if not isinstance(manifest, dict):
        raise SessionError("not an LLM Lens session (manifest.json is not an object)")
    fmt = manifest.get("format")
    name, _, version = fmt.partition("/") if isinstance(fmt, str) else ("", "", "")
    if name != FORMAT_NAME or not version.isdigit() or int(version) < 1:
        raise SessionError(f"not an LLM Lens session (format {fmt!r})")
    if int(version) > FORMAT_VERSION:
        raise SessionError(
            f"made by a newer LLM Lens (format {int(version)}); "
            f"this version reads format {FORMAT_VERSION}"
        )
    return manifest


def read_arrays(zf: zipfile.ZipFile, manifest: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every listed array, read only after all declared sizes passed the limits."""
    entries = manifest.get("arrays")
    if not isinstance(entries, dict):
        raise SessionError("the manifest lists no arrays")
    declared = {name: _declared(name, entry) for name, entry in entries.items()}
    check_limits([(name, nbytes) for name, (_, _, nbytes) in declared.items()])
    return {name: _read_npy(zf, name, *spec) for name, spec in declared.items()}


def _declared(name: str, entry: Any) -> tuple[np.dtype[Any], tuple[int, ...], int]:
    """(dtype, shape, bytes) a manifest entry claims, checked against the whitelist."""
    dtype, shape = (entry.get("dtype"), entry.get("shape")) if isinstance(entry, dict) else (0, 0)
    if dtype not in DTYPES:
        raise SessionError(f"array {name}: dtype {dtype!r} is not allowed")
    if not isinstance(shape, list) or len(shape) > 32 or not all(_count(n) for n in shape):
        raise SessionError(f"array {name}: bad shape {shape!r} in the manifest")
    return np.dtype(dtype), tuple(shape), math.prod(shape) * np.dtype(dtype).itemsize


def _check_member(zf: zipfile.ZipFile, name: str, dtype: Any, shape: Any, nbytes: int) -> None:
    """The member exists and holds the declared bytes plus a .npy header (under 64 KiB)."""
    try:
        size = zf.getinfo(name).file_size
    except KeyError:
        raise SessionError(f"array {name} is listed in the manifest but missing") from None
    if not nbytes < size <= nbytes + (1 << 16):
        raise SessionError(
            f"array {name}: the manifest says {dtype} {shape} ({nbytes:,} bytes), "
            f"the member holds {size:,} bytes"
        )


def _count(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _read_npy(
    zf: zipfile.ZipFile, name: str, dtype: np.dtype[Any], shape: tuple[int, ...], nbytes: int
) -> np.ndarray:
    """The array, read only after its .npy header matched the manifest (never unpickled)."""
    _check_member(zf, name, dtype, shape, nbytes)
    try:
        with zf.open(name) as f:
            version = npformat.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise SessionError(f"array {name}: unsupported .npy version {version}")
            read = (
                npformat.read_array_header_1_0
                if version == (1, 0)
                else npformat.read_array_header_2_0
            )
            got_shape, fortran, got = read(f)
            if got.name != dtype.name or got.hasobject or tuple(got_shape) != shape:
                raise SessionError(
                    f"array {name}: its .npy header says {got} {tuple(got_shape)}, "
                    f"the manifest says {dtype} {shape}"
                )
            data = f.read(nbytes)
            if len(data) != nbytes or f.read(1):  # reading to the end checks the CRC
                raise SessionError(f"array {name}: the data does not match its shape")
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise SessionError(f"array {name} is damaged ({exc})") from None
    except ValueError as exc:  # raised by numpy's header parser
        raise SessionError(f"array {name} is not a valid .npy file ({exc})") from None
    array = np.frombuffer(data, got).reshape(shape, order="F" if fortran else "C")
    return array if got.isnative else array.astype(got.newbyteorder("="))
