"""Finding and reading a config.json: a file, a folder holding one, or a Hugging Face hub id.

A config.json is kilobytes of JSON; anything else (a FIFO, a huge file, a number of 5000 digits,
endless nesting) is refused with a :class:`~.formula.ConfigError` naming what is wrong.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from llm_lens.core.kvcache.formula import ConfigError, _show

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
MAX_CONFIG_BYTES = 64 << 20  # a config.json is kilobytes; refuse to read a huge or endless file


def _looks_like_hub_id(spec: str) -> bool:
    return _HUB_ID.fullmatch(spec) is not None and not spec.endswith(".json")


def _local_config_path(spec: str) -> Path | None:
    """The config.json a local spec points at, or None when the spec is a hub id."""
    path = Path(os.path.expanduser(spec))  # an unknown ~user stays as it is: "does not exist"
    try:
        path.stat()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(f"config path {_show(spec)}: {exc.strerror or exc}") from None
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise ConfigError(f"folder {spec} has no config.json")
        return config
    if path.exists():
        return path
    if _looks_like_hub_id(spec):
        return None
    raise ConfigError(f"config path {spec} does not exist")


def _download_config(repo_id: str) -> Path:
    """Fetch config.json from the Hub (or its local cache when offline)."""
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id, "config.json"))
    except Exception as exc:  # hub, network and validation errors all mean "cannot get it"
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ConfigError(
            f"{repo_id} is not a local path and its config.json could not be fetched from the "
            f"Hugging Face Hub (offline and not cached?): {type(exc).__name__}: {first_line}"
        ) from exc


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb", opener=_open_nonblocking) as f:  # a FIFO must not hang the read
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ConfigError(f"{path} is not a regular file")
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path} is larger than a config.json can be (over 64 MiB)")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # also a 5000-digit number, [[[[…]]]] nesting
        raise ConfigError(f"{path} is not valid JSON: {_show(str(exc))}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a JSON {type(data).__name__}, not an object")
    return data


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def load_config(spec: str) -> dict[str, Any]:
    """Parse config.json from a file path, a folder holding one, or a Hugging Face hub id."""
    if not spec.strip():
        raise ConfigError("config spec is empty")
    path = _local_config_path(spec)
    return _read_json(path if path is not None else _download_config(spec))
