"""Screenshots of every pane: ``--selftest --screenshots DIR`` raises each pane's dock, waits
for its analyses and saves DIR/<pane>.png; ``make screenshots`` does it at both sizes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from llm_lens.desktop.cli import gui_parser
from llm_lens.desktop.startup.screenshots import PaneShots, file_name

ROOT = Path(__file__).resolve().parents[2]


def test_the_option_and_the_file_names():
    args = gui_parser().parse_args(["--selftest", "--screenshots", "shots", "--window-size",
                                    "1366x768"])  # fmt: skip
    assert args.screenshots == "shots" and args.window_size == (1366, 768)
    assert gui_parser().parse_args([]).screenshots is None
    assert file_name("Why this token?") == "why-this-token.png"
    assert file_name("KV cache") == "kv-cache.png"


def test_make_screenshots_writes_both_sizes_into_docs():
    dry = subprocess.run(
        ["make", "-n", "screenshots", "DISPLAY="], cwd=ROOT, capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stderr
    assert "1366x768" in dry.stdout and "1920x1080" in dry.stdout
    assert "--screenshots docs/screenshots/" in dry.stdout and "xvfb-run" in dry.stdout


@pytest.mark.slow
def test_every_pane_is_saved_after_its_analyses(qtbot, loaded_window, tmp_path):
    from llm_lens.core.sampling import GREEDY

    win, ctl = loaded_window, loaded_window.controller
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run("The bank of the river was steep", False, GREEDY, 3)
    outcome: list[str] = []
    PaneShots(win, tmp_path / "shots", outcome.append).start()
    qtbot.waitUntil(lambda: bool(outcome), timeout=240_000)
    assert outcome == [""]
    for title, dock in win.docks.items():
        image = QImage(str(tmp_path / "shots" / file_name(title)))
        assert not image.isNull(), title
        assert (image.width(), image.height()) == (dock.width(), dock.height()), title
        colours = {image.pixel(x, y) for x in range(0, image.width(), 7)
                   for y in range(0, image.height(), 7)}  # fmt: skip
        assert len(colours) > 3, f"{title} saved as a blank picture"
        assert not win.panes[title].empty_note.isVisibleTo(win.panes[title]), title
    assert not QImage(str(tmp_path / "shots" / "window.png")).isNull()


def test_an_unwritable_folder_is_said(qtbot, loaded_window, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    outcome: list[str] = []
    PaneShots(loaded_window, blocker / "shots", outcome.append).start()
    assert outcome and outcome[0].startswith("cannot make")
