#!/usr/bin/env bash
# One sitting of the CUDA benchmarks on a lent GPU machine, in one call (docs/performance.md,
# "CUDA"). Run here first: `.venv/bin/python benchmarks/cuda_sitting/pack.py` (writes .cuda-kit/,
# about 45 MiB). Then, from the repository root there, with .cuda-kit carried:
#
#     bash benchmarks/cuda_sitting/sit.sh            # everything, about 6-8 minutes
#
# Each benchmark's output goes to $OUT (or /tmp/cuda-sitting) as its own file, and to stdout.
# Environment: PYTHON (default python3), DEVICE (default cuda), SMOKE=1 for a short run of
# every step (to try the kit on a CPU here: PYTHON=.venv/bin/python DEVICE=cpu SMOKE=1).
set -uo pipefail
cd "$(dirname "$0")/../.."
kit=$PWD/.cuda-kit
out=${OUT:-/tmp/cuda-sitting}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
work=$(mktemp -d /tmp/llm-lens-sitting.XXXXXX)
mkdir -p "$out"
[ -f "$kit/site.tar.xz" ] || { echo "no $kit: run benchmarks/cuda_sitting/pack.py here first"; exit 2; }

step() {  # step NAME SECONDS COMMAND...: run with a time limit, output to $out/NAME.txt too
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s) $(date -u +%T)"
    local t0=$SECONDS
    PYTHONUNBUFFERED=1 timeout "$limit" "$@" 2>&1 | grep -v propagateSizeHints | tee "$out/$name.txt"
    echo "== $name: rc ${PIPESTATUS[0]}, $((SECONDS - t0)) s"
}

untar() {  # untar ARCHIVE FOLDER, with Python's tarfile (the image may have no xz)
    "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' "$@"
}

# the packages, this project, and the system libraries the machine lacks
mkdir -p "$work/site" "$work/pkg" "$work/lib" "$work/syslib"
untar "$kit/site.tar.xz" "$work/site"
if "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$kit"/wheels312/*.whl
fi
# this project as installed (pyproject.toml's package-dir), without a build: the image's
# setuptools may be older than the project's metadata needs
mkdir -p "$work/pkg/llm_lens"
cp llm_lens/__init__.py "$work/pkg/llm_lens/"
for part in core desktop resources; do ln -s "$PWD/$part" "$work/pkg/llm_lens/$part"; done
untar "$kit/syslib.tar.xz" "$work/syslib"
for lib in "$work"/syslib/*; do
    ldconfig -p | grep -q "^[[:space:]]*$(basename "$lib") " || ln -s "$lib" "$work/lib/"
done
export LD_LIBRARY_PATH=$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$work/site:$work/pkg
cat >"$work/fonts.conf" <<FONTS
<?xml version="1.0"?>
<fontconfig><dir>$kit/fonts</dir><cachedir>$work/fontconfig</cachedir></fontconfig>
FONTS
export FONTCONFIG_FILE=$work/fonts.conf  # the kit's fonts alone, whatever the image has
export QT_QPA_PLATFORM=offscreen QT_QPA_FONTDIR=$kit/fonts OMP_WAIT_POLICY=PASSIVE
export LLM_LENS_CACHE=$work/cache HF_HUB_OFFLINE=1
echo "libraries taken from the kit: $(ls "$work/lib" | tr '\n' ' ')"

step environment 60 "$py" -P - <<'EOF'
import os, platform, torch, transformers, PySide6, pyqtgraph, llm_lens.core
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0))
print("transformers", transformers.__version__, "PySide6", PySide6.__version__,
      "pyqtgraph", pyqtgraph.__version__)
print("llm_lens.core from", os.path.realpath(llm_lens.core.__path__[0]))
print("cores", os.cpu_count(), "load", os.getloadavg())
from PySide6.QtWidgets import QApplication, QLabel
app = QApplication([])
label = QLabel("offscreen Qt draws text")
print("Qt", label.sizeHint().width(), "px wide label in", label.font().family(), "on",
      app.platformName())
EOF

model=$work/smollm2-random
step standin 90 "$py" benchmarks/cuda_sitting/standin.py "$kit/model" "$model"

if [ "${SMOKE:-0}" = 1 ]; then
    step bench_engine 300 "$py" benchmarks/bench_engine.py --device "$device" --model "$model" --tokens 4 --long 0
    step probe_waits 120 "$py" benchmarks/cuda_sitting/probe_waits.py --device "$device" --model "$model" --reps 1 --tokens 8
    step bench_gui 300 "$py" benchmarks/bench_gui.py --device "$device" --model "$model" --reps 1 --tokens 4 --long 0
    step bench_gui_full 600 "$py" benchmarks/bench_gui.py --device "$device" --model "$model" --full-context --tokens 2
else
    # what the window's issue still needs first: a call stopped at its limit keeps what ran
    step bench_gui 240 "$py" benchmarks/bench_gui.py --device "$device" --model "$model" --reps 2
    step bench_gui_full 150 "$py" benchmarks/bench_gui.py --device "$device" --model "$model" --full-context --tokens 4
    step probe_waits 60 "$py" benchmarks/cuda_sitting/probe_waits.py --device "$device" --model "$model"
    step bench_engine 120 "$py" benchmarks/bench_engine.py --device "$device" --model "$model" --long 1000
fi
rm -rf "$work"
