"""File → Open model with placement… and the GUI's own --device-map/--max-memory/--quantize/
--allow-partly-random: the bundled model opened with 150 MiB on the CPU (most layers read from
disk) through the dialog generates the unsplit model's tokens and the status bar says where the
layers sit; a malformed value is one red line in the dialog, or one line and exit 2 on the
command line; a model with a missing weight loads only when allowed, marked in the status bar."""

from __future__ import annotations

from typing import Any

import pytest

from llm_lens.core.placement import Placement, parse_placement
from llm_lens.core.sampling import GREEDY

PROMPT = "Explain transformers like I am 12"


@pytest.fixture
def window(bare_window):
    return bare_window


def _open(qtbot, win, model: str = "", max_memory: str = "", device_map: str = "none",
          allow: bool = False, signal: str = "sig_model_loaded") -> Any:  # fmt: skip
    dialog = win.open_with_placement()
    dialog.model.setText(model)
    dialog.device_map.setCurrentText(device_map)
    dialog.max_memory.setText(max_memory)
    dialog.partly.setChecked(allow)
    with qtbot.waitSignal(getattr(win.controller, signal), timeout=120_000):
        dialog.accept()  # the Open button's slot
    return dialog


def test_the_dialog_opens_the_bundled_model_split_and_it_generates_the_same(qtbot, window, engine):
    from llm_lens.core.loop.engine import RunConfig

    calls: list[tuple] = []
    real = window.controller.request_load
    window.controller.request_load = lambda *a: calls.append(a) or real(*a)  # type: ignore
    _open(qtbot, window, max_memory="cpu=150MiB", device_map="auto")
    place = Placement(device_map="auto", max_memory=(("cpu", 150 * 2**20),))
    assert calls == [(None, "auto", "auto", place, False)]  # the controller call it makes
    assert window.placement == place == parse_placement("auto", "cpu=150MiB")
    info = window.controller.info
    assert {w for _n, w, _b in info.placement} == {"cpu", "disk"}
    status = window.model_label.text()
    assert "cpu: " in status and " · disk: layers " in status and " MB)" in status
    assert not window.partly_random_label.isVisible()
    with qtbot.waitSignal(window.controller.sig_run_finished, timeout=120_000) as finished:
        window.controller.request_run(PROMPT, True, GREEDY, 3)
    unsplit = engine.start(engine.tokenize(PROMPT, chat=True), GREEDY, RunConfig(3))
    unsplit.run_all()
    assert finished.args[0].generated_ids == tuple(s.token.id for s in unsplit.steps)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("cpu=lots", "Max memory: 'lots' is not a size"),
        ("gpu=2GiB", "Max memory: unknown device 'gpu'"),
        ("cpu=2GiB,cpu=1GiB", "Max memory: cpu is named twice"),
        ("cpu", "is not DEVICE=SIZE"),
        ("cpu=" + "9" * 5000, "Max memory: '99999"),  # cut to the dialog, whole in the tip
        ("cpu=" + "9" * 400 + "GiB", "is too large"),
    ],
)
def test_a_malformed_max_memory_is_one_red_line_in_the_dialog(qtbot, window, text, words):
    dialog = window.open_with_placement()
    loads: list[Any] = []
    window.controller.request_load = lambda *a: loads.append(a)  # type: ignore[method-assign]
    dialog.max_memory.setText(text)
    dialog.accept()
    assert dialog.isVisible() and not loads  # nothing loaded, the dialog waits for a fix
    line = dialog.error.text()
    assert dialog.error.isVisible() and words in line and "\n" not in line
    assert len(line) <= 110 and dialog.width() < 1000
    dialog.max_memory.setText("cpu=2GiB")
    dialog.accept()
    assert not dialog.isVisible() and not dialog.error.isVisible() and len(loads) == 1
    assert loads[0][3] == Placement("auto", (("cpu", 2 * 2**30),))


@pytest.fixture(scope="module")
def renamed(tokenizer, tmp_path_factory) -> str:
    """A tiny model whose file holds model.norm.weight under another name."""
    from tests.core.guards import builders as b

    tmp = tmp_path_factory.mktemp("partly")
    base = b.tiny_folder(tmp / "base", tokenizer)
    return str(b.with_renamed_tensor(base, tmp / "r", "model.norm.weight", "model.final.weight"))


def test_a_partly_random_model_loads_only_when_allowed_and_is_marked(
    qtbot, window, renamed, tmp_path
):
    _open(qtbot, window, model=renamed, signal="sig_error")
    error = window.prompt_panel.error.text()
    assert "model.norm.weight" in error and "--allow-partly-random" in error
    assert "\n" not in error and window.controller.info is None
    _open(qtbot, window, model=renamed, allow=True)
    mark = window.partly_random_label
    assert mark.isVisible() and mark.text().strip().startswith("partly random: 1 weights missing")
    assert "model.norm.weight" in mark.toolTip() and "#b3261e" in mark.styleSheet()
    _saved_files_say_so(qtbot, window, tmp_path, mark.toolTip().split("\n")[0])
    with qtbot.waitSignal(window.controller.sig_model_loaded, timeout=120_000):
        window.load(None)  # the choice holds for later loads; the bundled model lacks nothing
    assert window.allow_partly_random and not mark.isVisible()


def _saved_files_say_so(qtbot, win, tmp_path, mark: str) -> None:
    """A run of the partly random model, saved as a session and exported as a trace: both
    files' model records carry the mark, exactly."""
    import json

    from llm_lens.core.sessions.read import read_session

    ctl = win.controller
    assert mark.startswith("partly random: ")
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run("Hi", True, GREEDY, 2)
    session, trace = tmp_path / "p.llmlens", tmp_path / "p.json"
    with qtbot.waitSignal(
        ctl.sig_saved, timeout=60_000, check_params_cb=lambda p, _s: p == str(session)
    ):
        ctl.sessions.request_save(str(session))
    assert read_session(session).model["partly_random"] == mark
    ctl.sessions.request_export("trace", str(trace))
    qtbot.waitUntil(trace.exists, timeout=60_000)
    assert json.loads(trace.read_text(encoding="utf-8"))["model"]["partly_random"] == mark


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--max-memory", "cpu=lots"], "argument --max-memory: 'lots' is not a size"),
        (["--max-memory", "tpu=1GiB"], "unknown device 'tpu'"),
        (["--device-map", "everywhere"], "argument --device-map: invalid choice"),
        (["--quantize", "int3"], "argument --quantize: invalid choice"),
    ],
)
def test_the_gui_command_line_refuses_a_bad_placement_in_one_line(argv, words, capsys):
    from llm_lens.desktop.cli import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert err.startswith("llm-lens: error: ") and words in err


def test_the_gui_command_line_placement_reaches_the_window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path))
    from PySide6.QtWidgets import QApplication

    from llm_lens.desktop.cli import gui_parser
    from llm_lens.desktop.startup.app import _make_window

    argv = ["--model", "M", "--device-map", "sequential", "--max-memory", "cpu=2GiB",
            "--quantize", "int8", "--allow-partly-random"]  # fmt: skip
    win = _make_window(QApplication.instance(), gui_parser().parse_args(argv))
    qtbot.addWidget(win)
    win.sessions.confirm_close = False
    assert win.placement == Placement("sequential", (("cpu", 2 * 2**30),), "int8")
    assert win.allow_partly_random and win.model_spec == "M"
    dialog = win.open_with_placement()  # the dialog starts from the window's choice
    assert dialog.device_map.currentText() == "sequential" and dialog.read() == win.placement
    assert dialog.quantize.currentText() == "int8" and dialog.partly.isChecked()
    dialog.reject()
    plain = _make_window(QApplication.instance(), gui_parser().parse_args([]))
    qtbot.addWidget(plain)
    assert plain.placement is None and not plain.allow_partly_random
