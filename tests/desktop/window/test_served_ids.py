"""A served run on the real llama.cpp server shows its token ids in the window once it ends:
the server streams texts only, the ids come from its tokenize endpoint after the stream, and
the window's steps, the Tokens pane's chips and the Logits pane's step line carry them (not -1)
without a save and reopen.
They are the ids the bundled GGUF's own tokenizer (llama.cpp's, vocabulary only) gives the
texts."""

from __future__ import annotations

from llm_lens.core.engines.openai.live import ServerSpec
from llm_lens.core.sampling import GREEDY
from tests.core.engines.openai.conftest import llama_server  # noqa: F401 (the fixture)
from tests.core.engines.openai.llama_server import gguf_ids


def test_the_windows_steps_get_the_servers_ids_when_the_run_ends(
    qtbot,
    bare_window,
    llama_server,  # noqa: F811
):
    ctl = bare_window.controller
    with qtbot.waitSignal(ctl.sig_model_loaded, timeout=30_000):
        ctl.request_open_server(ServerSpec(llama_server))
    streamed: list[int] = []
    ctl.worker.sig_step.connect(lambda _run, record: streamed.append(record.token.id))
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=60_000):
        ctl.request_run("The capital of France is", False, GREEDY, 6)
    tokens = bare_window.panes["Tokens"]
    qtbot.waitUntil(lambda: not tokens.laying_out, timeout=5_000)
    tokens.render_and_paint()
    assert streamed and set(streamed) == {-1}  # the stream named texts only
    texts = [s.token.text for s in ctl.steps]
    ids = [s.token.id for s in ctl.steps]
    assert ids == [one for [one] in gguf_ids(texts)]  # each text is one GGUF token: its id
    assert ctl.steps[-1].finish_reason == "length"
    for n, step in enumerate(ctl.steps):  # each step's context is the prompt and ids before
        assert list(step.context_ids) == list(ctl.prompt.ids) + ids[:n]
    chips = tokens.model_view.chips
    assert [c.token_id for c in chips[len(ctl.prompt) :]] == ids  # the pane shows them
    assert [c.token_id for c in chips[: len(ctl.prompt)]] == list(ctl.prompt.ids)
    logits = bare_window.panes["Logits"]
    logits.render_and_paint()  # its step line names the selected (last) step's id
    assert ctl.selected == len(ids) - 1 and f"(id {ids[-1]})" in logits.info.text()
