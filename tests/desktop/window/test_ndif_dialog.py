"""File → Model on NDIF… in the window, through nnsight's ``remote="local"`` (the trace
serialised exactly as for NDIF, run here on the bundled model): the panes' records equal the
local engine's; a pane the engine does not fill says its line; the status line passes through
the job's states as the engine's status hook reports them (from the model thread); a saved run
reopens without the engine and no file holds the key; a bad id, no key and a server error are
each one line."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from llm_lens.core.engines.ndif.engine import MISSING, WHOLE, NdifEngine
from llm_lens.core.engines.ndif.live import NdifSpec
from llm_lens.core.engines.ndif.status import NO_KEY, JobStatus
from llm_lens.core.errors import LensError
from llm_lens.core.sampling import GREEDY
from llm_lens.desktop.panes.attention.header import next_run_line
from llm_lens.desktop.window.ndif_dialog import FULL, NdifDialog, open_ndif

PROMPT = "Explain transformers like I am 12"  # the conftest's greedy_run
LOCAL = NdifSpec(None, local=True)
SECRET = "ndif-test-secret-4242"
HEADS = ((3, 1), (20, 5))  # (layer, head) the user opens


@pytest.fixture
def window(bare_window):
    return bare_window


def open_model(qtbot, win, spec: NdifSpec = LOCAL):
    with qtbot.waitSignal(win.controller.sig_model_loaded, timeout=120_000):
        line = open_ndif(win, spec)  # what the dialog's Open calls
    return line


def run(qtbot, win, tokens: int = 8) -> None:
    with qtbot.waitSignal(win.controller.sig_run_finished, timeout=120_000):
        win.controller.request_run(PROMPT, True, GREEDY, tokens)
    qtbot.waitUntil(lambda: not win.panes["Tokens"].laying_out, timeout=5_000)
    qtbot.wait(200)  # the panes' scheduled renders


def note(win, capability: str) -> str | None:
    pane = next(p for p in win.panes.values() if p.capability == capability)
    pane.render_and_paint()
    return pane.empty_note.text() if pane.empty_note.isVisibleTo(pane) else None


def test_an_ndif_run_in_the_window_equals_the_local_engine(qtbot, window, greedy_run):
    line = open_model(qtbot, window)
    assert window.controller.worker.served.remote == "local"
    assert line.text() == "NDIF (local simulation): SmolLM2-135M-Instruct ready"
    run(qtbot, window)
    steps = window.controller.steps
    assert [s.token.id for s in steps] == greedy_run.generated_ids
    for a, b in zip(steps, greedy_run.steps, strict=True):
        assert (a.index, a.position, a.rank, a.prob, a.logprob) == (
            b.index, b.position, b.rank, b.prob, b.logprob
        )  # fmt: skip
        np.testing.assert_array_equal(a.top_ids, b.top_ids)
        np.testing.assert_array_equal(a.top_logits, b.top_logits)
        np.testing.assert_allclose(a.norm_table(), b.norm_table(), rtol=2e-6, atol=1e-5)
        assert a.kv.bytes_total == b.kv.bytes_total
    chips = [c.label for c in window.panes["Tokens"].model_view.chips]
    assert len(chips) >= len(steps) and window.panes["Tokens"].missing_line() is None
    for capability in ("residual", "interventions"):
        assert note(window, capability) == MISSING[capability]  # the pane says why, in one line
    assert window.controller.why_not("kv_cache") is None  # the KV cache pane draws
    assert line.status.seen == ["RECEIVED", "RUNNING", "COMPLETED"]  # the hook, via the thread
    assert line.text() == "NDIF (local simulation): last job completed, its 8 steps shown"


def test_opened_heads_go_with_the_next_job_and_draw_the_local_engines_rows(
    qtbot, window, greedy_run
):
    """The heads opened in the Attention pane travel with the next job; the map then draws
    their rows (the prompt's last query's and each new token's), equal to the local engine's,
    the prompt's other rows unread. The Sampling note says how NDIF gets exact stages, the
    Positions pane only the engine's line, the model line where runs go."""
    open_model(qtbot, window)
    ctl, pane = window.controller, window.panes["Attention"]
    for layer, head in HEADS:  # opened before the run: each says it comes with the next
        pane.show_head(layer, head)
        assert note(window, "attention") == next_run_line(layer, head, MISSING["attention"])
    run(qtbot, window)
    sent = ctl.worker.workbench.store.runs[ctl.run_id].spec.heads
    assert set(HEADS) <= set(sent) and sent == ctl.capabilities.heads()
    n_prompt = len(ctl.prompt)
    for layer, head in HEADS:
        pane.show_head(layer, head)
        assert note(window, "attention") is None  # drawn
        assert pane.matrix.shape[0] == n_prompt + len(greedy_run.steps) - 1
        for b in greedy_run.steps:  # the drawn rows equal the local engine's
            drawn = pane.matrix[b.position, : b.position + 1]
            np.testing.assert_allclose(drawn, b.attention[layer, head], rtol=1e-4, atol=1e-6)
        assert np.isnan(pane.matrix[: n_prompt - 1]).all()  # stayed on the server
        assert "rows brought back for the heads you open" in pane.header.text()
    pane.show_head(5, 0)  # not sent with the job just run
    assert note(window, "attention") == next_run_line(5, 0, MISSING["attention"])
    assert (5, 0) in ctl.capabilities.heads()
    sampling = window.panes["Sampling"]
    sampling.render_and_paint()
    assert sampling.note.text() == (
        "Approximate: this run brought back 50 alternatives, not the whole distribution. "
        f"NDIF runs bring back the top 50 logits and a histogram of the rest (each other "
        f"token at its bin's level): tick '{WHOLE}' in File → Model on NDIF… for exact stages."
    )
    assert FULL.startswith(WHOLE)  # the dialog's checkbox it names
    positions = window.panes["Positions"]
    assert note(window, "residual") == MISSING["residual"]
    assert positions.summary.text() == ""  # no stale "reading the model's positions…"
    assert " · NDIF (local simulation on cpu) · " in window.model_label.text()


def test_the_status_line_follows_the_hook_from_another_thread(qtbot, window):
    line = open_model(qtbot, window)
    said = [
        JobStatus("RECEIVED"), JobStatus("QUEUED", "Queue position: 3"), JobStatus("RUNNING"),
    ]  # fmt: skip
    shown: list[str] = []
    line.status.sig_status.connect(lambda _s, text: shown.append(line.text()))
    thread = threading.Thread(target=lambda: [line.status.report(s) for s in said])
    thread.start()  # as the engine reports them, from the model thread blocked on the job
    thread.join()
    qtbot.waitUntil(lambda: len(shown) == 3, timeout=5_000)
    assert shown == [
        "NDIF (local simulation): the server received the job",
        "NDIF (local simulation): queued (position 3)",
        "NDIF (local simulation): running",
    ]
    line.status.report(JobStatus("ERROR", "out of memory\non the server"))
    assert line.text() == "NDIF (local simulation): error: out of memory on the server"
    line.status.report(JobStatus("COMPLETED"))
    assert line.text().startswith("NDIF (local simulation): completed")


def test_a_saved_ndif_run_reopens_without_the_engine_and_holds_no_key(
    qtbot, window, tmp_path, monkeypatch
):
    """The key read from NDIF_API_KEY travels with the engine (as a hosted one holds it; the
    runs here go through remote="local") and enters no session file nor setting."""
    monkeypatch.setenv("NDIF_API_KEY", SECRET)
    made: list[NdifEngine] = []

    def hosted(hub_id, key, host=None):  # NDIF cannot be reached here: the same job, locally
        from llm_lens.core.loading import load_model

        made.append(NdifEngine.local(load_model(None)))
        made[-1].key = key
        return made[-1]

    monkeypatch.setattr(NdifEngine, "hosted", staticmethod(hosted))
    open_model(qtbot, window, NdifSpec("HuggingFaceTB/SmolLM2-135M-Instruct"))
    assert made[0].key == SECRET
    run(qtbot, window, 4)
    ctl, path = window.controller, tmp_path / "ndif.llmlens"
    texts = [s.token.text for s in ctl.steps]
    mine = lambda saved, _size: saved == str(path)  # noqa: E731  # not the run end's autosave
    with qtbot.waitSignal(ctl.sig_saved, timeout=60_000, check_params_cb=mine):
        ctl.sessions.request_save(str(path))
    with qtbot.waitSignal(ctl.sig_session_changed, timeout=60_000):
        window.sessions.open(str(path))
    qtbot.wait(200)
    assert ctl.session.engine["name"] == "ndif" and "key" not in ctl.session.engine
    assert [s.token.text for s in ctl.steps] == texts
    assert ctl.why_not("attention") == MISSING["attention"] and ctl.why_not("tokens") is None
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert path in written
    for file in written:  # the session, its autosave, the settings
        try:
            assert SECRET.encode() not in file.read_bytes(), file
        except FileNotFoundError:  # an autosave's temporary file, renamed since
            continue


def test_no_key_and_a_bad_id_are_one_line(qtbot, window, monkeypatch):
    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    ctl = window.controller
    with qtbot.waitSignal(ctl.sig_error, timeout=30_000) as said:
        line = open_ndif(window, NdifSpec("meta-llama/Llama-3.1-8B"))
    assert said.args == [NO_KEY]
    assert not line.isVisible()  # it did not open: the status bar's message says why
    with pytest.raises(LensError, match="is not a Hub id"):
        NdifSpec("not-an-id").check()
    with pytest.raises(LensError, match="no model folder"):
        NdifSpec("/no/such/folder", local=True).check()
    monkeypatch.setenv("NDIF_API_KEY", SECRET)
    with qtbot.waitSignal(ctl.sig_error, timeout=60_000) as said:
        open_ndif(window, NdifSpec("nobody/no-such-model-here"))  # offline: the Hub unreachable
    (message,) = said.args
    assert message.startswith("NDIF: cannot read nobody/no-such-model-here") and "\n" not in message
    assert SECRET not in message


def test_a_server_error_is_one_line_in_the_window(qtbot, window, monkeypatch):
    from nnsight.intervention.backends.remote import RemoteError

    line = open_model(qtbot, window)

    def failing(self, on_status):
        def backend(_tracer):
            on_status(JobStatus("ERROR", "model not served"))
            raise RemoteError("model not served\nby this deployment")

        return backend

    monkeypatch.setattr(NdifEngine, "backend", failing)
    ctl = window.controller
    with qtbot.waitSignal(ctl.sig_error, timeout=60_000) as said:
        ctl.request_run(PROMPT, True, GREEDY, 4)
    (message,) = said.args
    assert message == "NDIF: model not served by this deployment"
    qtbot.waitUntil(lambda: "error" in line.text(), timeout=5_000)
    assert line.text() == "NDIF (local simulation): error: model not served"


def test_the_dialog_checks_and_saves_no_key(qtbot, tmp_path, monkeypatch):
    from PySide6.QtCore import QSettings

    from llm_lens.desktop.window.ndif_dialog import KEYS

    monkeypatch.setenv("NDIF_API_KEY", SECRET)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    dialog = NdifDialog(settings)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.key.text().startswith("from NDIF_API_KEY"), timeout=5_000)
    dialog.model.setText("just-a-name")
    dialog.accept()
    assert "is not a Hub id" in dialog.status.text() and dialog.result() == 0
    dialog.model.setText("meta-llama/Llama-3.1-8B")
    dialog.host.setText(f"https://me:{SECRET}@ndif.example.org")
    dialog.accept()
    assert "no user, password" in dialog.status.text() and dialog.result() == 0
    dialog.host.setText("https://ndif.example.org/")
    dialog.full.setChecked(True)
    dialog.accept()
    assert dialog.spec() == NdifSpec(
        "meta-llama/Llama-3.1-8B", False, True, "https://ndif.example.org"
    )
    settings.sync()
    assert settings.value(KEYS["model"]) == "meta-llama/Llama-3.1-8B"
    assert SECRET not in (tmp_path / "s.ini").read_text()
    dialog.backend.setCurrentIndex(1)
    dialog.model.clear()  # the bundled model, run here
    assert dialog.key.text().startswith("not needed") and dialog.spec() == NdifSpec(
        None, True, True
    )


def test_the_file_menu_offers_it(window):
    file_menu = window.menuBar().actions()[0].menu()
    titles = [a.text() for a in file_menu.actions()]
    assert "Model on &NDIF…" in titles
    assert titles.index("Model on &NDIF…") == titles.index("Open &server…") + 1
