"""The check for the xcb plugin's system libraries, with a loader that fakes missing ones."""

from __future__ import annotations

import subprocess
import sys

from llm_lens.desktop.startup import qt_libs

XCB = {"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"}


def test_missing_libraries_are_named_with_the_install_commands():
    gone = {"libxcb-icccm.so.4", "libxcb-keysyms.so.1"}
    line = qt_libs.check(loads=lambda name: name not in gone, environ=XCB)
    assert "\n" not in line
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in line
    assert "sudo apt-get install libxcb-icccm4 libxcb-keysyms1 (Debian/Ubuntu)" in line
    assert "sudo dnf install xcb-util-keysyms xcb-util-wm (Fedora)" in line


def test_nothing_is_said_when_every_library_loads_or_xcb_is_not_used():
    assert qt_libs.check(loads=lambda _name: True, environ=XCB) == ""
    for env in ({"QT_QPA_PLATFORM": "offscreen"}, {"WAYLAND_DISPLAY": "wayland-0"},
                {"QT_QPA_PLATFORM": "wayland;xcb"}):  # fmt: skip
        assert qt_libs.check(loads=lambda _name: False, environ=env) == ""
    assert qt_libs.uses_xcb({"DISPLAY": ":0"}) is True
    assert qt_libs.uses_xcb({"QT_QPA_PLATFORM": "xcb:nograb"}) is True


def test_the_deb_depends_on_every_library_checked():
    from pathlib import Path

    build = (Path(__file__).parents[3] / "packaging" / "build.sh").read_text(encoding="utf-8")
    depends = build[build.index("DEPENDS=(") : build.index(")", build.index("DEPENDS=("))].split()
    for debian, _fedora in qt_libs.XCB_LIBRARIES.values():
        assert debian in depends, debian


def test_llm_lens_exits_with_the_line_before_qt_starts(monkeypatch):
    """The real entry point, with one library made to fail to load."""
    code = (
        "import sys, llm_lens.desktop.startup.qt_libs as q\n"
        "real = q._loads\n"
        "q._loads = lambda n: n != 'libxcb-cursor.so.0' and real(n)\n"
        "q.check.__defaults__ = (q._loads, None)\n"
        "from llm_lens.desktop.cli import main\n"
        "sys.exit(main([]))\n"
    )
    env = {"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":99", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "libxcb-cursor.so.0" in lines[0] and "libxcb-cursor0" in lines[0]
    assert "Traceback" not in done.stderr
