"""The wheel as a user installs it: one import name (``llm_lens``) with its resources inside,
installed without downloading anything into a fresh environment beside another distribution
that ships a top-level ``core`` package, and the app's selftest run from there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("llm_lens", "core", "desktop", "resources", "pyproject.toml", "README.md")


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd}\n{done.stdout}\n{done.stderr}"
    return done  # type: ignore[no-any-return]


def _wheel(source: Path, out: Path) -> Path:
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
          "--no-index", "-w", str(out), str(source)])  # fmt: skip
    return next(out.glob("*.whl"))


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(llm-lens wheel, a dummy distribution's wheel with a top-level ``core``), built from
    copies so the checkout gets no build folders."""
    tmp = tmp_path_factory.mktemp("wheels")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    dummy = tmp / "dummy"
    (dummy / "core").mkdir(parents=True)
    (dummy / "core" / "__init__.py").write_text("WHO = 'the dummy distribution'\n")
    (dummy / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "dummy-core"\nversion = "1.0"\n'
        '[tool.setuptools]\npackages = ["core"]\n'
    )
    return _wheel(src, tmp / "dist"), _wheel(dummy, tmp / "dummy-dist")


def test_the_wheel_installs_one_package_with_its_resources(wheels: tuple[Path, Path]) -> None:
    names = zipfile.ZipFile(wheels[0]).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"llm_lens"}
    for needed in (
        "llm_lens/resources/prompts.json",
        "llm_lens/resources/icons/llm-lens-64.png",
        "llm_lens/core/loop/engine.py",
        "llm_lens/desktop/window/main_window.py",
    ):
        assert needed in names


def test_the_installed_app_passes_its_selftest_beside_another_core(
    wheels: tuple[Path, Path], tmp_path: Path, loaded: object
) -> None:
    """``loaded`` makes sure the bundled model's converted copy is in the cache already."""
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
          "--no-deps", "--no-index", *map(str, wheels)])  # fmt: skip
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
                     ).stdout.strip())  # fmt: skip
    # the dependencies (torch, transformers, Qt …) come from the test environment, after the
    # fresh environment's own packages on sys.path
    (site / "zz_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "LLM_LENS_CONFIG_DIR": str(tmp_path)}
    env.pop("LLM_LENS_RESOURCES", None)
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(venv / "bin" / "llm-lens"), "--selftest", "--tokens", "2"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "selftest: ok" in done.stderr
    assert f"example prompts and the icon found in {site / 'llm_lens' / 'resources'}" in (
        done.stderr
    )
    both = _run(
        [str(python), "-c", "import core, llm_lens.core.loop.engine as e; print(core.WHO); "
         "print(e.__file__)"], cwd=tmp_path, env=env,
    ).stdout.splitlines()  # fmt: skip
    assert both[0] == "the dummy distribution"
    assert both[1].startswith(str(site / "llm_lens" / "core"))
