"""The whole window: streaming, scrubbing, cancelling, closing mid-run, errors as messages."""

from __future__ import annotations

import pytest

from llm_lens.core.sampling import GREEDY, SamplingParams

PROMPT = "Explain transformers like I am 12"


@pytest.fixture
def window(loaded_window):
    return loaded_window


def _run(qtbot, win, tokens=6, params=GREEDY, text=PROMPT):
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        win.controller.request_run(text, True, params, tokens)


def test_status_bar_names_the_model(window):
    text = window.model_label.text()
    assert "SmolLM2-135M-Instruct" in text and "cpu" in text and "float32" in text
    assert "30 layers" in text and "9/3 heads" in text and "context 8192" in text


def test_run_streams_tokens_into_the_response(qtbot, window):
    seen = []
    window.controller.sig_steps_changed.connect(lambda: seen.append(len(window.controller.steps)))
    _run(qtbot, window, tokens=8)
    steps = window.controller.steps
    assert len(steps) == 8
    assert seen and seen[-1] == 8
    expected = b"".join(s.token.raw for s in steps if not s.token.special).decode()
    assert window.prompt_panel.response.toPlainText() == expected
    assert window.prompt_panel.slider.maximum() == 7


def test_scrubber_moves_every_pane(qtbot, window):
    _run(qtbot, window)
    for pane in window.panes.values():
        pane.render_times_ms.clear()
    window.prompt_panel.slider.setValue(2)
    assert window.controller.selected == 2
    qtbot.waitUntil(lambda: all(p.render_times_ms for p in window.panes.values()), timeout=5000)
    window.prompt_panel.step_by(-1)
    assert window.controller.selected == 1 and window.prompt_panel.slider.value() == 1


def test_stop_cancels_between_steps(qtbot, window):
    ctl = window.controller
    ctl.sig_steps_changed.connect(lambda: ctl.request_stop() if len(ctl.steps) >= 2 else None)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000) as blocker:
        ctl.request_run(PROMPT, True, GREEDY, 200)
    summary = blocker.args[0]
    assert summary.finish_reason == "cancelled"
    assert 2 <= len(ctl.steps) < 200


def test_run_twice_keeps_only_the_second_run(qtbot, window):
    ctl = window.controller
    ctl.request_run(PROMPT, True, GREEDY, 200)
    _run(qtbot, window, tokens=3, params=SamplingParams(seed=5), text="Say hi")
    assert len(ctl.steps) <= 3
    assert all(s.run_id == ctl.run_id for s in ctl.steps)


def test_close_during_a_run_stops_the_thread(qtbot, window):
    ctl = window.controller
    with qtbot.waitSignal(ctl.sig_steps_changed, timeout=120_000):
        ctl.request_run(PROMPT, True, GREEDY, 500)
    window.close()
    assert ctl._thread.isFinished()


def test_user_mistakes_become_messages_in_the_window(qtbot, window):
    with qtbot.waitSignal(window.controller.sig_error, timeout=60_000):
        window.controller.request_run("", False, GREEDY, 4)
    assert window.prompt_panel.error.isVisible()
    assert "empty" in window.prompt_panel.error.text()
    with qtbot.waitSignal(window.controller.sig_error, timeout=60_000):
        window.load("/no/such/model/folder")
    assert "/no/such/model/folder" in window.prompt_panel.error.text()


def test_export_pane_writes_files(qtbot, window, tmp_path):
    _run(qtbot, window, tokens=3)
    qtbot.wait(200)
    window.export_pane("Logits", str(tmp_path / "logits.csv"))
    window.export_pane("Logits", str(tmp_path / "logits.png"))
    lines = (tmp_path / "logits.csv").read_text(encoding="utf-8").splitlines()
    assert len(lines) > 1
    assert (tmp_path / "logits.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_layout_is_remembered(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_LENS_CONFIG_DIR", str(tmp_path))
    from llm_lens.desktop.window.main_window import MainWindow

    first = MainWindow()
    qtbot.addWidget(first)
    first.show()
    first.docks["Timing"].setVisible(False)
    first.close()
    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    assert not second.docks["Timing"].isVisible()
    assert second.docks["Tokens"].isVisible()
    second.close()


def test_cancelling_a_load_keeps_the_previous_model(qtbot, window):
    ctl = window.controller
    before = ctl.info
    ctl.sig_model_loading.connect(lambda _f, _m: ctl.request_stop())
    with qtbot.waitSignal(ctl.sig_error, timeout=60_000) as blocker:
        window.load(None)
    assert "cancelled" in blocker.args[0]
    assert ctl.info is before and not ctl.busy
    assert "SmolLM2" in window.model_label.text()
    _run(qtbot, window, tokens=2)  # the previous model still runs
    assert len(ctl.steps) == 2
