"""Compare and Branch in the window against a server opened through File → Open server's
controller call: on the real llama.cpp server each column's tokens and log-probabilities are
the server's own reply to its request and a branch is the server's reply to the text so far;
on a test double a stream cut mid-run or a 401 is one line and keeps what was shown."""

from __future__ import annotations

import pytest

from llm_lens.core.engines.openai import Endpoint, OpenAIEngine
from llm_lens.core.engines.openai.live import ServerSpec
from llm_lens.core.runs.served_compare import SOLID_MISSING
from llm_lens.core.sampling import GREEDY, SamplingParams
from llm_lens.desktop.state.compare_served import BEAM_LINE, CHAT_LINE
from llm_lens.desktop.views.branch_view import SERVED_NOTE
from tests.core.engines.openai.conftest import llama_server  # noqa: F401 (the fixture)
from tests.core.engines.openai.fake_server import Fake, serving
from tests.core.engines.openai.test_llama_server import non_streamed

SETTINGS = [GREEDY, SamplingParams(temperature=0.9, top_p=0.9, seed=5)]


def open_server(qtbot, win, url: str) -> None:
    with qtbot.waitSignal(win.controller.sig_model_loaded, timeout=30_000):
        win.controller.request_open_server(ServerSpec(url))


def compare(qtbot, win, text: str, chat: bool, tokens: int = 5):
    view = win.open_compare()
    with qtbot.waitSignal(win.controller.compare.sig_compare_finished, timeout=60_000):
        win.controller.compare.request_compare(text, chat, SETTINGS, tokens)
    qtbot.wait(100)  # the view's coalesced draw
    return view


def kept(win, run_id):
    return win.controller.worker.workbench.store.kept[run_id]


def test_compare_columns_are_the_servers_replies(qtbot, bare_window, llama_server):  # noqa: F811
    open_server(qtbot, bare_window, llama_server)
    view = compare(qtbot, bare_window, "Once upon a time", False)
    state = bare_window.controller.compare
    engine = OpenAIEngine(Endpoint(llama_server), None)
    for column, run_id in enumerate(state.start.run_ids):
        reply = non_streamed(engine, kept(bare_window, run_id))["logprobs"]
        steps = state.columns[column]
        assert [s.token.text for s in steps] == reply["tokens"]
        assert [s.logprob for s in steps] == pytest.approx(reply["token_logprobs"], abs=1e-4)
        assert len(view.columns[column].chips.chips) == len(steps)
        assert "approximate (top 20)" in view.columns[column].header.text()
    assert "served by" in view.info.text() and "first divergence" in view.info.text()
    assert SOLID_MISSING in view.curves_note.text()
    assert view.curves[0].getData()[0] is None or len(view.curves[0].getData()[0]) == 0
    with qtbot.waitSignal(bare_window.controller.sig_run_finished, timeout=10_000):
        state.show_column(1)  # "show in panes"
    assert [s.token.text for s in bare_window.controller.steps] == reply["tokens"]


def test_a_branch_is_the_servers_reply_to_the_text_so_far(qtbot, bare_window, llama_server):  # noqa: F811
    ctl = bare_window.controller
    open_server(qtbot, bare_window, llama_server)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=30_000):
        ctl.request_run("The capital of France is", False, GREEDY, 5)
    root = [s.token.text for s in ctl.steps]
    ctl.request_select(1)
    view = bare_window.open_branch()
    assert view.served_note.isVisibleTo(view) and view.served_note.text() == SERVED_NOTE
    assert [a.text for a in view.alternatives] == list(ctl.steps[1].top_texts[:10])
    assert view.table.item(1, 1).text() == "—" and view.table.item(1, 3).text() == "?"
    forced = view.alternatives[view.table.currentRow()].text
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=30_000):
        view.branch()
    path = kept(bare_window, ctl.run_id)
    assert path.sent["prompt"] == "The capital of France is" + root[0] + forced
    reply = non_streamed(OpenAIEngine(Endpoint(llama_server), None), path)["logprobs"]
    shown = [s.token.text for s in ctl.steps]  # the path: before, the forced token, the reply
    assert shown == [root[0], forced, *reply["tokens"]]
    assert [s.token.id for s in ctl.steps] == [s.token.id for s in path.steps]  # named ids
    assert all(s.token.id >= 0 for s in ctl.steps)  # not -1: the server's tokenize named them
    qtbot.waitUntil(lambda: len(ctl.compare.nodes) == 2, timeout=5_000)  # branch_done
    assert view.tree.topLevelItemCount() == 1
    top = view.tree.topLevelItem(0)
    assert top.childCount() == 1 and repr(forced) in top.child(0).text(2)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=10_000):
        view.tree.setCurrentItem(top)  # the root, shown again
    assert [s.token.text for s in ctl.steps] == root


def test_beam_and_a_chat_branch_say_why_not(qtbot, bare_window):
    ctl, errors = bare_window.controller, []
    ctl.compare.sig_error.connect(lambda kind, line: errors.append((kind, line)))
    with serving(Fake()) as url:
        open_server(qtbot, bare_window, url)
        with qtbot.waitSignal(ctl.sig_run_finished, timeout=20_000):
            ctl.request_run("Hi", True, GREEDY, 4)
        ctl.compare.request_beam("Hi", True, 2, 4)
        ctl.compare.request_branch(0, -1, 3, " there")
    assert errors == [("beam", BEAM_LINE), ("branch", CHAT_LINE)]


@pytest.mark.parametrize("mode", ["cut", "malformed"])
def test_a_stream_failing_mid_run_keeps_each_column(qtbot, bare_window, mode):
    fake = Fake()
    with serving(fake) as url:
        open_server(qtbot, bare_window, url)
        fake.mode = mode
        view = compare(qtbot, bare_window, "Hi", True)
    assert [len(c.chips.chips) for c in view.columns] == [1, 1]  # "Hello" each
    for column in view.columns:
        line = column.stats.text()
        assert "finish: error" in line and "\n" not in line


def test_a_refused_comparison_is_one_line_and_keeps_the_run_shown(qtbot, bare_window):
    ctl, fake = bare_window.controller, Fake()
    with serving(fake) as url:
        open_server(qtbot, bare_window, url)
        with qtbot.waitSignal(ctl.sig_run_finished, timeout=20_000):
            ctl.request_run("Hi", True, GREEDY, 4)
        view = bare_window.open_compare()
        fake.mode = "401"
        with qtbot.waitSignal(ctl.compare.sig_error, timeout=20_000):
            ctl.compare.request_compare("Hi", True, SETTINGS, 4)
    assert view.error.isVisibleTo(view) and "401" in view.error.text()
    assert "\n" not in view.error.text()
    assert [s.token.text for s in ctl.steps] == ["Hello", " world"] and not ctl.busy


def test_a_whole_distribution_is_labelled_exact(qtbot, bare_window):
    from llm_lens.core.engines.openai.engine import EVERY_TOKEN

    ctl = bare_window.controller
    with serving(Fake("whole")) as url:
        with qtbot.waitSignal(ctl.sig_model_loaded, timeout=30_000):
            ctl.request_open_server(ServerSpec(url, top_logprobs=EVERY_TOKEN))
        view = compare(qtbot, bare_window, "Hi", True)
    assert all(c.header.text().endswith("· exact") for c in view.columns)
    outcome = ctl.compare.outcome
    assert all(not s.approximate for c in ctl.compare.columns for s in c)
    assert outcome.own_kl_per_step == pytest.approx([0.0, 0.0], abs=1e-9)  # one reply twice
    assert "no KL" not in view.curves_note.text()


def test_continue_grows_the_served_run_and_what_if_is_refused(qtbot, bare_window, llama_server):  # noqa: F811
    ctl, errors = bare_window.controller, []
    ctl.compare.sig_error.connect(lambda kind, line: errors.append((kind, line)))
    open_server(qtbot, bare_window, llama_server)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=30_000):
        ctl.request_run("Once upon a time", False, GREEDY, 4)
    first = [s.token.text for s in ctl.steps]
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=30_000):
        ctl.compare.request_continue(3)
    grown = [s.token.text for s in ctl.steps]
    assert grown[:4] == first and len(grown) == 7
    alone = OpenAIEngine(Endpoint(llama_server), None)
    run = alone.start(alone.tokenize("Once upon a time", chat=False), GREEDY,
                      kept(bare_window, ctl.run_id).config)  # fmt: skip
    run.config = type(run.config)(max_new_tokens=7)
    run.run_all()
    assert grown == [s.token.text for s in run.steps]  # greedy goes on as one run would
    ctl.compare.request_compare("Hi", False, SETTINGS, 3, [(), ("a change",)])
    assert errors[-1][0] == "compare" and errors[-1][1].startswith("a server runs its model")


def test_a_served_comparison_saves_and_reopens_without_the_server(qtbot, bare_window, tmp_path):
    ctl, path = bare_window.controller, str(tmp_path / "compared.llmlens")
    with serving(Fake()) as url:
        open_server(qtbot, bare_window, url)
        compare(qtbot, bare_window, "Hi", True)
    columns = [[s.token.text for s in c] for c in ctl.compare.columns]
    with qtbot.waitSignal(ctl.sig_saved, timeout=20_000):
        ctl.sessions.request_save(path)
    with qtbot.waitSignal(ctl.sig_session_changed, timeout=20_000):
        bare_window.sessions.open(path)
    qtbot.waitUntil(lambda: ctl.compare.outcome is not None, timeout=5_000)
    assert ctl.session.engine["name"] == "openai" and len(ctl.session.comparisons) == 1
    assert [[s.token.text for s in c] for c in ctl.compare.columns] == columns


def test_stop_ends_a_served_comparison_keeping_its_tokens(qtbot, bare_window):
    ctl, fake = bare_window.controller, Fake()
    with serving(fake) as url:
        open_server(qtbot, bare_window, url)
        fake.mode = "slow"  # a 2 s pause after each stream's first token
        view = bare_window.open_compare()

        def stop_once_every_column_has_a_token(*_: object) -> None:
            columns = ctl.compare.columns  # the streams are parallel: their first tokens race
            if len(columns) == len(SETTINGS) and all(len(c) >= 1 for c in columns):
                ctl.compare.request_stop()

        ctl.compare.sig_compare_step.connect(stop_once_every_column_has_a_token)
        ctl.compare.request_compare("Hi", True, SETTINGS, 8)
        qtbot.waitUntil(lambda: ctl.compare.outcome is not None and not ctl.busy, timeout=20_000)
    assert ctl.compare.outcome.finish_reasons == ("cancelled", "cancelled")
    assert all(len(c) >= 1 for c in ctl.compare.columns)
    qtbot.waitUntil(lambda: "finish: cancelled" in view.columns[0].stats.text(), timeout=5_000)


def test_a_saved_served_tree_reopens_without_the_server(
    qtbot,
    bare_window,
    tmp_path,
    llama_server,  # noqa: F811
):
    """Branch twice on llama.cpp (a branch, then a branch of it), save, open the file (read
    alone, no request): the Branches view shows the same tree, each node's path the tokens
    and log-probabilities shown."""
    ctl, path = bare_window.controller, str(tmp_path / "tree.llmlens")
    view = bare_window.open_branch()
    shown = {}
    open_server(qtbot, bare_window, llama_server)
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=30_000):
        ctl.request_run("The capital of France is", False, GREEDY, 4)
    shown[ctl.run_id] = [(s.token.text, s.logprob) for s in ctl.steps]
    for step, nodes in ((1, 2), (2, 3)):  # the second branches the first branch
        ctl.request_select(step)
        qtbot.waitUntil(lambda: len(view.alternatives) > 1, timeout=5_000)
        with qtbot.waitSignal(ctl.sig_run_finished, timeout=30_000):
            view.branch()
        qtbot.waitUntil(lambda n=nodes: len(ctl.compare.nodes) == n, timeout=5_000)
        shown[ctl.run_id] = [(s.token.text, s.logprob) for s in ctl.steps]
    live = [(n.run_id, n.parent_run_id, n.branch_step, n.forced_token.text if n.forced_token
             else None, n.text) for n in ctl.compare.nodes]  # fmt: skip
    with qtbot.waitSignal(ctl.sig_saved, timeout=20_000):
        ctl.sessions.request_save(path)
    with qtbot.waitSignal(ctl.sig_session_changed, timeout=20_000):
        bare_window.sessions.open(path)
    again = [(n.run_id, n.parent_run_id, n.branch_step, n.forced_token.text if n.forced_token
              else None, n.text) for n in ctl.compare.nodes]  # fmt: skip
    assert sorted(again) == sorted(live) and len(again) == 3
    top = view.tree.topLevelItem(0)
    assert view.tree.topLevelItemCount() == 1 and top.child(0).child(0) is not None
    for run_id, steps in shown.items():
        ctl.compare.show_node(run_id)
        qtbot.waitUntil(lambda r=run_id: ctl.compare.current_node() == r, timeout=5_000)
        assert [(s.token.text, s.logprob) for s in ctl.steps] == steps
