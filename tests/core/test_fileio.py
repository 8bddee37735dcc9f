"""Safe writes: through a symlink, never over a device, FIFO or folder, mode kept, stale temps
of a killed write cleaned, the previous file intact when the write fails."""

from __future__ import annotations

import os
import stat
import time

import pytest

from llm_lens.core.errors import LensError
from llm_lens.core.fileio import (
    STALE_AFTER_S,
    PathError,
    atomic_write,
    atomic_write_text,
    user_path,
    write_target,
)


def test_writes_through_a_symlink_and_keeps_the_mode(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    written = atomic_write_text(link, "new")
    assert written == target.resolve()
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_new_file_gets_the_umask_mode_not_0600(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640


@pytest.mark.parametrize("kind", ["folder", "fifo", "device", "dangling-to-folder"])
def test_refuses_what_is_not_a_regular_file(tmp_path, kind):
    if kind == "folder":
        path = tmp_path / "d"
        path.mkdir()
    elif kind == "fifo":
        path = tmp_path / "f"
        os.mkfifo(path)
    elif kind == "device":
        path = "/dev/null"
    else:
        (tmp_path / "d").mkdir()
        path = tmp_path / "l"
        path.symlink_to(tmp_path / "d")
    before = os.stat(path)
    with pytest.raises(PathError, match="not a regular file"):
        atomic_write_text(path, "x")
    after = os.stat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


@pytest.mark.parametrize("name", ["", "   ", "~nosuchuser-llmlens/x.json", "a\x00b"])
def test_bad_names_are_one_clear_error(name):
    with pytest.raises(PathError) as info:
        write_target(name)
    assert isinstance(info.value, LensError) and "\n" not in str(info.value)


def test_known_home_expands(tmp_path):
    assert user_path("~/x") == user_path(os.path.expanduser("~/x"))


def test_failed_write_keeps_the_previous_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("previous")

    def broken(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(PathError, match="No space left"):
        atomic_write(target, broken)
    assert target.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_stale_temps_of_a_killed_write_are_cleaned_fresh_ones_kept(tmp_path):
    target = tmp_path / "run.llmlens"
    stale = tmp_path / ".run.llmlens.k1ll3d.tmp"  # the old session writer's name
    stale2 = tmp_path / ".run.llmlens.abc123.tmp.llmlens"
    fresh = tmp_path / ".run.llmlens.busy99.tmp"  # another writer, still at work
    other = tmp_path / ".other.llmlens.old.tmp"  # not ours to clean
    for p in (stale, stale2, fresh, other):
        p.write_bytes(b"partial")
    old = time.time() - STALE_AFTER_S - 5
    for p in (stale, stale2, other):
        os.utime(p, (old, old))
    atomic_write_text(target, "done")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([fresh.name, other.name, "run.llmlens"])
