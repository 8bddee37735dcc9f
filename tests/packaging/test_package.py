"""The standalone .deb end to end: build it (or reuse a fresh one), install it with apt-get, run
the installed app as a normal user (offscreen), check the menu entry, remove it.

Run with ``make package-test`` (root, Debian or Ubuntu, apt sources reachable). It changes the
machine: it installs and removes the package and creates, then deletes, a test user.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.package

ROOT = Path(__file__).resolve().parents[2]
USER = os.environ.get("LLM_LENS_TEST_USER", "llmlens-test")
INSTALL_DIR = Path("/opt/llm-lens")
SOURCES = ("llm_lens", "core", "desktop", "resources", "packaging", "pyproject.toml", "Makefile")
APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


def _version() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    assert match, "no version in pyproject.toml"
    return match.group(1)


def _newest_source_mtime() -> float:
    newest = 0.0
    for name in SOURCES:
        path = ROOT / name
        files = [path] if path.is_file() else path.rglob("*")
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                newest = max(newest, f.stat().st_mtime)
    return newest


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]


def _as_user(home: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    """Run the installed command as the test user in a clean environment, offscreen."""
    env = [
        f"HOME={home}",
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "LANG=C.UTF-8",
        "QT_QPA_PLATFORM=offscreen",
    ]
    return _run(["runuser", "-u", USER, "--", "env", "-i", *env, *args], cwd=home, timeout=timeout)


@pytest.fixture(scope="module")
def deb() -> Path:
    if os.geteuid() != 0 or shutil.which("dpkg-deb") is None or shutil.which("apt-get") is None:
        pytest.skip("needs root on Debian/Ubuntu (dpkg-deb, apt-get)")
    arch = _run(["dpkg", "--print-architecture"], check=True).stdout.strip()
    path = ROOT / "dist" / f"llm-lens_{_version()}_{arch}.deb"
    just_built = os.environ.get("LLM_LENS_PACKAGE_BUILT") == "1"  # set by `make package-test`
    if not path.is_file() or (not just_built and path.stat().st_mtime < _newest_source_mtime()):
        subprocess.run(["bash", str(ROOT / "packaging" / "build.sh")], cwd=ROOT, check=True)
    assert path.is_file()
    return path


@pytest.fixture(scope="module")
def installed(deb: Path) -> Iterator[Path]:
    """The package installed with apt-get (dependencies included); removed again at the end."""
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", str(deb)]
    result = _run(cmd, env=APT_ENV)
    if result.returncode != 0:  # stale package lists: refresh once
        _run(["apt-get", "update"], env=APT_ENV)
        result = _run(cmd, env=APT_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    try:
        yield deb
    finally:
        if _run(["dpkg", "-s", "llm-lens"]).returncode == 0:
            _run(["apt-get", "remove", "-y", "llm-lens"], env=APT_ENV)


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    """A fresh home folder for a non-root user (created with useradd when missing)."""
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", USER], check=True)
        created = True
    folder = Path(tempfile.mkdtemp(prefix="llm-lens-home-", dir="/tmp"))
    shutil.chown(folder, USER, USER)
    folder.chmod(0o700)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if created:
            _run(["userdel", USER])


def test_installed_layout(installed: Path) -> None:
    listed = _run(["dpkg", "-L", "llm-lens"], check=True).stdout.splitlines()
    assert Path("/usr/bin/llm-lens").resolve() == INSTALL_DIR / "llm-lens"
    assert (INSTALL_DIR / "_internal" / "model" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    assert (INSTALL_DIR / "_internal" / "resources" / "prompts.json").is_file()
    for size in (16, 32, 48, 64, 128, 256, 512):
        assert f"/usr/share/icons/hicolor/{size}x{size}/apps/llm-lens.png" in listed
    assert "/usr/share/icons/hicolor/scalable/apps/llm-lens.svg" in listed
    # The bundle carries the CPU torch build only.
    assert not list((INSTALL_DIR / "_internal").rglob("libcudart*"))
    assert not list((INSTALL_DIR / "_internal").rglob("libtorch_cuda*"))


def test_what_the_app_never_loads_is_left_out(installed: Path) -> None:
    """The lean rules of packaging/llm-lens.spec hold, and what the app loads is kept."""
    internal = INSTALL_DIR / "_internal"
    qt = internal / "PySide6" / "Qt"
    gone = [
        qt / "translations",
        qt / "plugins" / "tls",
        qt / "plugins" / "platforms" / "libqvnc.so",
        qt / "plugins" / "platforms" / "libqeglfs.so",
        internal / "torch" / "include",
        internal / "torch" / "bin" / "upgrader_models",
        internal / "torch" / "testing" / "_internal" / "common_utils.py",
    ]
    assert [str(path) for path in gone if path.exists()] == []
    assert not list(internal.glob("transformers/models/*/modular_*.py"))
    assert not list(qt.glob("lib/libQt6Network.so*"))
    kept = [
        qt / "plugins" / "platforms" / "libqxcb.so",
        qt / "plugins" / "platforms" / "libqwayland.so",
        qt / "plugins" / "platforms" / "libqoffscreen.so",
        qt / "plugins" / "imageformats" / "libqsvg.so",
        internal / "torch" / "testing" / "_internal" / "logging_tensor.py",  # for checkpoint
        internal / "torch" / "testing" / "_internal" / "distributed" / "fake_pg.py",
        internal / "transformers" / "models" / "llama" / "modeling_llama.py",
    ]
    assert [str(path) for path in kept if not path.is_file()] == []


def test_menu_entry_validates(installed: Path) -> None:
    if shutil.which("desktop-file-validate") is None:
        cmd = ["apt-get", "install", "-y", "--no-install-recommends", "desktop-file-utils"]
        subprocess.run(cmd, env=APT_ENV, check=True, capture_output=True)
    entry = "/usr/share/applications/llm-lens.desktop"
    result = _run(["desktop-file-validate", entry])
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
    text = Path(entry).read_text(encoding="utf-8")
    assert "\nExec=llm-lens" in text and "\nIcon=llm-lens" in text


def test_help_as_user(installed: Path, home: Path) -> None:
    result = _as_user(home, "llm-lens", "--help", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "--selftest" in result.stdout and "trace" in result.stdout


def test_trace_as_user(installed: Path, home: Path) -> None:
    """The bundled model is found in the bundle and converted into the user's cache."""
    result = _as_user(home, "llm-lens", "trace", "hi", "--max-new-tokens", "3", "--greedy")
    assert result.returncode == 0, result.stderr[-3000:]
    trace = json.loads(result.stdout)
    assert trace["output_text"].strip(), trace
    converted = list((home / ".cache" / "llm-lens" / "models").glob("*/model.safetensors"))
    assert converted, "the dequantized model is not in the user's cache folder"


def test_selftest_screenshot_as_user(
    installed: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shot = home / "shot.png"
    result = _as_user(home, "llm-lens", "--selftest", "--screenshot", str(shot))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "selftest: ok" in result.stderr
    ttft = re.search(r"TTFT (\d+) ms", result.stderr)
    assert ttft, result.stderr[-3000:]
    with capsys.disabled():
        print(f"\ninstalled selftest: first token after {ttft.group(1)} ms")

    from PySide6.QtGui import QImage

    image = QImage(str(shot))
    assert not image.isNull(), "the screenshot is not a readable PNG"
    assert image.width() > 800 and image.height() > 500, (image.width(), image.height())
    colours = {
        image.pixel(x, y)
        for x in range(0, image.width(), max(1, image.width() // 64))
        for y in range(0, image.height(), max(1, image.height() // 64))
    }
    assert len(colours) > 20, f"the screenshot is nearly one colour ({len(colours)} colours)"
    # Settings went to the user's config folder.
    assert (home / ".config" / "llm-lens").is_dir()


def test_install_folder_untouched(installed: Path) -> None:
    """Running the app wrote nothing into the (read-only, shared) install folder."""
    listed = set(_run(["dpkg", "-L", "llm-lens"], check=True).stdout.splitlines())
    on_disk = {str(p) for p in INSTALL_DIR.rglob("*")}
    extra = sorted(on_disk - listed)
    assert not extra, f"files appeared in {INSTALL_DIR}: {extra[:10]}"


def test_remove(installed: Path) -> None:
    result = _run(["apt-get", "remove", "-y", "llm-lens"], env=APT_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    status = _run(["dpkg-query", "-W", "-f=${Status}", "llm-lens"]).stdout
    assert "installed" not in status.replace("not-installed", ""), status
    assert not INSTALL_DIR.exists()
    assert not Path("/usr/bin/llm-lens").exists()
    assert not Path("/usr/share/applications/llm-lens.desktop").exists()
