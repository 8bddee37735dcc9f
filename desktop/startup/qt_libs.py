"""Before the window opens: can Qt's xcb platform plugin load its system libraries?

Without them Qt aborts with "Could not load the Qt platform plugin xcb" and a core dump. The
wheel carries Qt but not these X11 helper libraries; a fresh desktop install often lacks
``libxcb-icccm4``, ``libxcb-keysyms1`` or ``libxcb-cursor0``. Each library is loaded with
``ctypes`` (what the dynamic linker would do for the plugin); a missing one becomes one line that
names it and the command that installs it. The .deb's ``Depends`` (packaging/build.sh) lists them.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

# soname: (Debian/Ubuntu package, Fedora package); what libQt6XcbQpa and libqxcb link against
XCB_LIBRARIES: dict[str, tuple[str, str]] = {
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
}


def uses_xcb(environ: dict[str, str] | None = None, platform: str | None = None) -> bool:
    """Will Qt pick the xcb plugin? Not for offscreen, wayland, other platforms or systems."""
    env = os.environ if environ is None else environ
    if not (platform or sys.platform).startswith("linux"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "").strip().lower()
    if chosen:
        return chosen.split(";")[0].split(":")[0] == "xcb"
    return not env.get("WAYLAND_DISPLAY")


def _loads(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def missing_libraries(loads: Callable[[str], bool] = _loads) -> list[str]:
    """The sonames in :data:`XCB_LIBRARIES` that do not load."""
    return [name for name in XCB_LIBRARIES if not loads(name)]


def install_hint(missing: list[str]) -> str:
    """The one line printed when ``missing`` is not empty."""
    debian = sorted({XCB_LIBRARIES[n][0] for n in missing})
    fedora = sorted({XCB_LIBRARIES[n][1] for n in missing})
    return (
        f"llm-lens: Qt cannot open a window: missing system libraries {', '.join(missing)}; "
        f"install them with: sudo apt-get install {' '.join(debian)} (Debian/Ubuntu) or "
        f"sudo dnf install {' '.join(fedora)} (Fedora)"
    )


def check(loads: Callable[[str], bool] = _loads, environ: dict[str, str] | None = None) -> str:
    """'' when the window can open, else the line to print (the caller exits non-zero)."""
    if not uses_xcb(environ):
        return ""
    missing = missing_libraries(loads)
    return install_hint(missing) if missing else ""
