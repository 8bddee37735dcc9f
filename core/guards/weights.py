"""The weights loaded exactly as the files hold them, and named by their bytes.

transformers fills any weight the files lack (a config with more layers than the weights, a
renamed tensor) with random numbers, skips what the files hold that the model has no place for,
and with ``ignore_mismatched_sizes`` replaces a tensor of another shape the same way, and says so
only in a log line. :func:`check_loading_info` reads its ``output_loading_info`` report and
refuses such a load in one line naming the tensors (and, for a shape, both shapes), unless the
user allows it: then the model is marked "partly random" wherever it is shown or written.

:func:`weights_id` hashes the weight files' bytes (SHA-256, streamed), remembered per (path,
size, mtime, inode) in the cache folder so a model of gigabytes is read once, not each launch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llm_lens.core.errors import ModelLoadError

SHOWN = 3  # tensor names a line names before "and N more"
CHUNK = 8 * 2**20
_memo: dict[str, str] = {}


def check_loading_info(info: dict[str, Any], spec: str, allow_partly_random: bool) -> str:
    """ "" when every weight came from the files; else, when allowed, what is random (for
    :attr:`ModelInfo.partly_random`), or :class:`ModelLoadError` in one line."""
    missing = sorted(str(k) for k in info.get("missing_keys") or ())
    unexpected = sorted(str(k) for k in info.get("unexpected_keys") or ())
    mismatched = [_shapes(m) for m in info.get("mismatched_keys") or ()]
    if mismatched and not allow_partly_random:
        name, held, wanted = mismatched[0]
        more = f" (and {len(mismatched) - 1} more tensors)" if len(mismatched) > 1 else ""
        raise ModelLoadError(
            f"{spec}: weight {name} is {held} in the file; the config implies {wanted}{more}"
        )
    parts = []
    if missing:
        parts.append(f"{len(missing)} weights missing from the files ({_names(missing)})")
    if mismatched:
        parts.append(f"{len(mismatched)} of another shape ({_names(m[0] for m in mismatched)})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected weights ignored ({_names(unexpected)})")
    if not parts:
        return ""
    if not allow_partly_random:
        raise ModelLoadError(
            f"{spec}: the weights do not fit the config: {'; '.join(parts)}; refusing a model "
            "that would be partly random (--allow-partly-random loads it, marked so)"
        )
    return "partly random: " + "; ".join(parts)


def refuse_random_on_disk(model: Any, random: str, spec: str) -> None:
    """A partly random model whose device map put layers on disk is refused in one line:
    accelerate reads a disk-offloaded weight back from the checkpoint's own files, where a
    random one (missing, or of another shape) is not, so its first forward would fail (a
    ``KeyError`` on the missing name) or read the file's tensor of the wrong shape."""
    device_map = getattr(model, "hf_device_map", None) or {}
    if random and "disk" in {str(where) for where in device_map.values()}:
        raise ModelLoadError(
            f"{spec}: a partly random model cannot have layers on disk (its random weights are "
            "in no file to read them back from): give the devices room for it (--max-memory)"
        )


def _shapes(item: Any) -> tuple[str, str, str]:
    """(name, shape in the file, shape the config implies) from one mismatched-keys entry."""
    name, held, wanted = (
        (list(item) + [None, None])[:3] if isinstance(item, tuple | list) else (item, None, None)
    )
    return str(name), _dims(held), _dims(wanted)


def _dims(shape: Any) -> str:
    try:
        return "[" + ", ".join(str(int(d)) for d in shape) + "]"
    except TypeError:
        return "of another shape"


def _names(names: Iterable[str]) -> str:
    names = list(names)
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def weights_id(files: list[Path], cache_dir: Path | None = None) -> str:
    """A short SHA-256 of the files' bytes, in order (names and sizes do not enter it)."""
    if not files:
        return "unknown"
    h = hashlib.sha256()
    for path in files:
        h.update(file_digest(path, cache_dir).encode())
    return h.hexdigest()[:16] if len(files) > 1 else file_digest(path, cache_dir)[:16]


def file_digest(path: Path, cache_dir: Path | None = None) -> str:
    """SHA-256 of one file's bytes, remembered per (real path, size, mtime, inode)."""
    st = path.stat()
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    if key in _memo:
        return _memo[key]
    stored = _load_memo(cache_dir)
    if key not in stored:
        h = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
        stored[key] = h.hexdigest()
        _save_memo(cache_dir, stored)
    _memo[key] = stored[key]
    return stored[key]


def _memo_file(cache_dir: Path | None) -> Path | None:
    return None if cache_dir is None else cache_dir / "weights-digests.json"


def _load_memo(cache_dir: Path | None) -> dict[str, str]:
    path = _memo_file(cache_dir)
    if path is None or not path.is_file() or path.stat().st_size > 16 * 2**20:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _save_memo(cache_dir: Path | None, stored: dict[str, str]) -> None:
    """Best effort: a cache that cannot be written only costs a re-read next launch."""
    path = _memo_file(cache_dir)
    if path is None:
        return
    from llm_lens.core.fileio import atomic_write_text

    keep = dict(list(stored.items())[-256:])  # the newest 256 files
    with contextlib.suppress(OSError, ValueError):
        os.makedirs(path.parent, exist_ok=True)
        atomic_write_text(path, json.dumps(keep))
