"""The window on every family of the test matrix: load the model from a folder as a user would,
run it, and every pane draws its data with no error shown (what the selftest checks).

One window serves every family (File → Open model, again and again), so the test costs about a
model load, four tokens and one repaint of each pane per family.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication

from llm_lens.core.sampling import GREEDY
from tests.families import FAMILIES, WINDOW, family_model
from tests.hybrid_families import HYBRIDS, hybrid_model
from tests.newer_families import NEWER, UNCACHED, newer_model
from tests.stream_families import STREAMS, stream_model

# longer than the windowed families' sliding window, so their windowed layers are exercised
PROMPT = "The quick brown fox jumps over the lazy dog and runs far away"


@pytest.fixture(scope="module")
def window(qapp: Any, tmp_path_factory: Any) -> Any:
    os.environ["LLM_LENS_CONFIG_DIR"] = str(tmp_path_factory.mktemp("config"))
    from llm_lens.desktop.window.main_window import MainWindow

    win = MainWindow()
    win.sessions.confirm_close = False
    win.show()
    win.resize_to(1366, 768)
    yield win
    win.close()
    win.controller.shutdown()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_pane_draws_the_family(
    qtbot: Any, window: Any, tokenizer: Any, tmp_path: Path, name: str
) -> None:
    _draw_every_pane(qtbot, window, family_model(name, tokenizer), tokenizer, tmp_path, name)


@pytest.mark.parametrize("name", list(HYBRIDS))
def test_every_pane_draws_the_hybrid_or_state_space_family(
    qtbot: Any, window: Any, tokenizer: Any, tmp_path: Path, name: str
) -> None:
    """Layers that are not attention (Mamba, gated DeltaNet, short convolution, latent
    attention): every pane draws, and no analysis fails for a layer without a map."""
    _draw_every_pane(qtbot, window, hybrid_model(name, tokenizer), tokenizer, tmp_path, name)
    info, pane = window.controller.info, window.panes["Attention"]
    plain = [n for n in range(info.num_layers) if not info.has_attention(n)]
    if plain:  # such a layer says why it has no map, rather than "computing…" for ever
        pane.layer_box.setValue(plain[0])
        pane.render_and_paint()
        assert "has no attention map" in pane.header.text()
        assert info.layer_kinds[plain[0]] in pane.header.text()


@pytest.mark.parametrize("name", list(NEWER))
def test_every_pane_draws_the_newer_family(
    qtbot: Any, window: Any, tokenizer: Any, tmp_path: Path, name: str
) -> None:
    """MiMo-V2-Flash (K/V heads by layer) and Inkling (query heads by layer too): every pane
    draws; a head past a layer's own count says so in the Attention pane's header."""
    _draw_every_pane(qtbot, window, newer_model(name, tokenizer), tokenizer, tmp_path, name)
    info, pane = window.controller.info, window.panes["Attention"]
    narrow = [n for n in range(info.num_layers) if info.heads_in(n) < info.num_heads]
    if narrow:
        window.docks["Attention"].raise_()
        pane.layer_box.setValue(narrow[0])
        pane.head_box.setValue(info.num_heads - 1)
        pane.render_and_paint()
        assert f"layer {narrow[0]} has {info.heads_in(narrow[0])} query heads" in pane.header.text()
        assert pane.matrix.size == 0 and pane.explainer() is None  # no map of a head it has not
    if os.environ.get("LLM_LENS_SHOTS"):  # a look at it: LLM_LENS_SHOTS=folder
        window.docks["KV cache"].raise_()
        window.panes["KV cache"].render_and_paint()
        window.grab().save(os.path.join(os.environ["LLM_LENS_SHOTS"], f"{name}.png"))


@pytest.mark.parametrize("name", list(STREAMS))
def test_every_pane_draws_the_family_of_parallel_residual_streams(
    qtbot: Any, window: Any, tokenizer: Any, tmp_path: Path, name: str
) -> None:
    """Gemma 3n, DeepSeek-V4, HY-v4: every pane draws, and the Layer stack says in one line
    that the residual it shows is what the model's own tail reads."""
    _draw_every_pane(qtbot, window, stream_model(name, tokenizer), tokenizer, tmp_path, name)
    label = window.panes["Layer stack"].streams_label
    assert label.isVisibleTo(window) and "4 parallel streams" in label.text()


@pytest.mark.parametrize("name", list(UNCACHED))
def test_every_pane_draws_the_family_fed_the_whole_sequence(
    qtbot: Any, window: Any, tokenizer: Any, tmp_path: Path, name: str
) -> None:
    """GPT-1 (no cache) and CPM-Ant run in the uncached step mode: every pane draws, and the
    KV cache pane says in one line that GPT-1 holds none, with no formula."""
    _draw_every_pane(qtbot, window, newer_model(name, tokenizer), tokenizer, tmp_path, name)
    text = window.panes["KV cache"].formula_text(window.controller.steps[-1])
    assert ("keeps no KV cache" in text) == (name == "openai-gpt")
    if name == "openai-gpt":
        assert "\n" not in text and "0 bytes held" in text
    if os.environ.get("LLM_LENS_SHOTS"):  # a look at it: LLM_LENS_SHOTS=folder
        window.docks["KV cache"].raise_()
        window.panes["KV cache"].render_and_paint()
        window.grab().save(os.path.join(os.environ["LLM_LENS_SHOTS"], f"{name}.png"))


def _draw_every_pane(
    qtbot: Any, window: Any, loaded: Any, tokenizer: Any, tmp_path: Path, name: str
) -> None:
    loaded.model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    ctl = window.controller
    errors: list[str] = []
    ctl.sig_error.connect(errors.append)
    try:
        with qtbot.waitSignal(ctl.sig_model_loaded, timeout=120_000):
            window.load(str(tmp_path))
        for pane in window.panes.values():
            pane.render_times_ms.clear()
        with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
            ctl.request_run(PROMPT, False, GREEDY, 4)
        ctl.request_select(len(ctl.steps) - 1)
        for title, pane in window.panes.items():  # every pane to the front once, then drawn
            window.docks[title].raise_()
            QApplication.processEvents()
            pane.render_and_paint()

        def all_drawn() -> bool:
            QApplication.processEvents()
            return all(p.render_times_ms for p in window.panes.values())

        qtbot.waitUntil(all_drawn, timeout=60_000)
        qtbot.wait(300)  # analyses the panes asked for come back (or fail) meanwhile
        assert errors == [], f"{name}: {errors}"
        assert len(ctl.steps) == 4 and ctl.steps[0].position + 1 > WINDOW
        assert ctl.info.architecture == type(loaded.model).__name__
    finally:
        ctl.sig_error.disconnect(errors.append)
