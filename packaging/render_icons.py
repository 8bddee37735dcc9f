"""Render resources/icons/llm-lens.svg into the PNG, ICO (Windows) and ICNS (macOS) icons.

    .venv/bin/python packaging/render_icons.py [--check]

The outputs are committed, so a build needs no renderer; ``--check`` only verifies that the
committed files are present and decode at the right sizes (build.sh runs it).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"
SVG = ICONS / "llm-lens.svg"
SIZES = (16, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 32, 48, 64, 128, 256)
# ICNS element types holding PNG data, by pixel size (the @2x types reuse the larger renders).
ICNS_TYPES = (
    (b"icp4", 16),
    (b"icp5", 32),
    (b"icp6", 64),
    (b"ic07", 128),
    (b"ic08", 256),
    (b"ic09", 512),
    (b"ic11", 32),
    (b"ic12", 64),
    (b"ic13", 256),
    (b"ic14", 512),
)


def png_path(size: int) -> Path:
    return ICONS / f"llm-lens-{size}.png"


def render(renderer: QSvgRenderer, size: int) -> bytes:
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data.data())


def ico(pngs: dict[int, bytes]) -> bytes:
    """A Windows .ico whose entries are PNG images (read by Windows Vista and later)."""
    header = struct.pack("<HHH", 0, 1, len(ICO_SIZES))
    offset = 6 + 16 * len(ICO_SIZES)
    entries, blobs = b"", b""
    for size in ICO_SIZES:
        blob = pngs[size]
        side = 0 if size >= 256 else size  # 0 means 256 in an ICO directory entry
        entries += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(blob), offset)
        offset += len(blob)
        blobs += blob
    return header + entries + blobs


def icns(pngs: dict[int, bytes]) -> bytes:
    """A macOS .icns made of PNG elements (what iconutil writes on macOS 10.7 and later)."""
    body = b"".join(kind + struct.pack(">I", 8 + len(pngs[s])) + pngs[s] for kind, s in ICNS_TYPES)
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def write_all() -> None:
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"{SVG}: not a valid SVG for Qt")
    pngs = {size: render(renderer, size) for size in SIZES}
    for size, blob in pngs.items():
        png_path(size).write_bytes(blob)
    (ICONS / "llm-lens.ico").write_bytes(ico(pngs))
    (ICONS / "llm-lens.icns").write_bytes(icns(pngs))
    print(f"wrote {len(pngs)} PNGs, llm-lens.ico and llm-lens.icns into {ICONS}")


def check() -> None:
    for size in SIZES:
        image = QImage(str(png_path(size)))
        if image.isNull() or (image.width(), image.height()) != (size, size):
            raise SystemExit(f"{png_path(size)}: missing or not {size}x{size}")
    for name, magic in (("llm-lens.ico", b"\0\0\1\0"), ("llm-lens.icns", b"icns")):
        path = ICONS / name
        if not path.is_file() or path.read_bytes()[:4] != magic:
            raise SystemExit(f"{path}: missing or not an icon file")
    print("icons: ok")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the committed icons only")
    args = parser.parse_args()
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841
    check() if args.check else write_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
