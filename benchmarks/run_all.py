"""``make bench``: every benchmark, printing its figures (not part of ``make test``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

for script in (
    "bench_engine.py",
    "bench_gui.py",
    "bench_explain.py",
    "bench_session.py",
    "bench_sweep.py",
    "families_sweep.py",
    "bench_ndif.py",
    "bench_placement.py",
    "bench_served.py",
    "bench_big.py",  # tens of GB of disk: skips with one line where they are not free
):
    if (HERE / script).exists():
        print(f"== {script}", flush=True)
        subprocess.run([sys.executable, str(HERE / script)], check=True)
