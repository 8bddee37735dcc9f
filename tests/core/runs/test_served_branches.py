"""The Branches view's served job against a real llama.cpp server: a branch is the server's
own reply to the text so far with the forced token; the run it came from becomes the tree's
root; a branch of a branch nests; the alternatives are the server's."""

from __future__ import annotations

import math

import pytest

from llm_lens.core.engines.openai import Endpoint, OpenAIEngine
from llm_lens.core.errors import LensError
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.runs.served_branches import (
    served_alternatives,
    served_branch_job,
    tree_of,
)
from llm_lens.core.runs.workbench import Workbench
from llm_lens.core.sampling import GREEDY
from tests.core.engines.openai.conftest import llama_server  # noqa: F401 (the fixture)
from tests.core.engines.openai.test_llama_server import non_streamed


@pytest.fixture
def served(llama_server):  # noqa: F811 (a new engine: a new tree)
    return OpenAIEngine(Endpoint(llama_server), None, top_logprobs=4)


def root_run(engine, bench, text="The capital of France is", run_id=1):
    run = engine.start(engine.tokenize(text, chat=False), GREEDY, RunConfig(max_new_tokens=5))
    run.run_id = run_id
    run.run_all()
    bench.store.runs[run_id] = run  # as served_live leaves it
    return run


def test_a_branch_is_the_servers_reply_to_the_text_so_far(served):
    bench = Workbench(served)
    root = root_run(served, bench)
    alts = served_alternatives(root.steps[1], 4)
    assert [a.text for a in alts] == list(root.steps[1].top_texts[:4])
    assert alts[0].chosen and all(a.final_prob is None for a in alts)
    other = next(a for a in alts if not a.chosen)
    items = list(served_branch_job(1, 1, other.text, 3, 2)(bench))
    tags = [t for t, _ in items]
    assert tags == [
        "history", "run_started", *["step"] * 5, "steps_named", "run_finished", "branch_done"
    ]  # fmt: skip
    path = bench.store.kept[2]
    assert path.sent["prompt"] == root.prompt.text + root.steps[0].token.text + other.text
    streamed = [p for t, p in items if t == "step"]
    assert [s.token.id for s in streamed[2:]] == [-1, -1, -1]  # llama.cpp streams texts only
    steps = list(items[tags.index("steps_named")][1])  # the ids named once the reply ended
    assert [s.token.text for s in steps] == [s.token.text for s in streamed]
    assert steps == path.steps and all(s.token.id >= 0 for s in steps)
    ids = served.ids
    assert [s.token.id for s in steps] == [ids.id_of(s.token.text) for s in steps]
    assert [s.index for s in steps] == list(range(5))
    assert steps[0].token == root.steps[0].token and steps[1].token.text == other.text
    assert steps[1].prob == pytest.approx(other.prob) and steps[1].rank == 1
    reply = non_streamed(served, path)["logprobs"]  # the same request, not streamed
    assert [s.token.text for s in steps[2:]] == reply["tokens"]
    assert [s.logprob for s in steps[2:]] == pytest.approx(reply["token_logprobs"], abs=1e-4)
    assert all(s.run_id == 2 for s in steps) and path.steps[-1].finish_reason == "length"
    assert [s.position for s in steps] == [len(root.prompt) - 1 + i for i in range(5)]
    shown, nodes = items[-1][1]
    assert shown.run_id == 2 and shown.prompt == root.prompt and [n.run_id for n in nodes] == [1, 2]
    node = nodes[1]
    assert (node.parent_run_id, node.branch_step, node.offset) == (1, 1, 2)
    assert node.forced_token.text == other.text
    assert node.text == "".join(reply["tokens"])
    expected = root.steps[0].logprob + math.log(other.prob) + sum(reply["token_logprobs"])
    assert node.cumulative_logprob == pytest.approx(expected, rel=1e-4)


def test_a_branch_of_a_branch_nests_and_a_continuation_goes_on(served):
    bench = Workbench(served)
    root = root_run(served, bench)
    list(served_branch_job(1, 2, " Paris", 3, 2)(bench))
    first = bench.store.kept[2]
    assert len(first.steps) == 6
    last = first.steps[-1].token.text
    items = list(served_branch_job(2, 5, last, 2, 3, continued=True)(bench))
    assert "history" not in [t for t, _ in items]  # the branch is in the tree already
    nodes = items[-1][1][1]
    end = nodes[-1]
    assert (end.parent_run_id, end.depth, end.offset, end.continued) == (2, 2, 6, True)
    grown = bench.store.kept[3]
    assert grown.sent["prompt"] == root.prompt.text + first.output_text()
    assert [s.token for s in grown.steps[:6]] == [s.token for s in first.steps]
    assert len(grown.steps) == 8 and tree_of(served).all() == nodes


def test_a_refused_branch_shows_nothing(served, monkeypatch):
    from llm_lens.core.engines.openai.client import ServerError

    bench = Workbench(served)
    root_run(served, bench)
    served.endpoint = Endpoint(served.endpoint.base_url + "/nowhere")
    with pytest.raises(ServerError) as said:
        list(served_branch_job(1, 1, " x", 2, 2)(bench))
    assert "\n" not in str(said.value) and 2 not in bench.store.kept


def test_a_run_no_longer_kept_is_one_line(served):
    with pytest.raises(LensError, match="no longer kept"):
        list(served_branch_job(99, 0, " x", 2, 100)(Workbench(served)))


def saved_tree(served, bench, tmp_path):
    """Branch the root twice (a branch, then a branch of it), save as the window does (the
    shown run first, then the tree), and the file's path."""
    from llm_lens.core.runs.served_branches import tree_runs
    from llm_lens.core.sessions.assemble import with_runs
    from llm_lens.core.sessions.format import Session, session_from_run
    from llm_lens.core.sessions.write import save_session

    root = root_run(served, bench)
    list(served_branch_job(1, 1, root.steps[1].top_texts[1], 3, 2)(bench))
    list(served_branch_job(2, 3, bench.store.kept[2].steps[3].top_texts[2], 2, 3)(bench))

    def make(run, label=None, parent=None):
        return session_from_run(run, served.info, label, parent)

    shown = Session(served.info.as_dict(), (make(bench.store.kept[3]),),
                    shown=0, engine=served.identity.as_dict())  # fmt: skip
    path = tmp_path / "tree.llmlens"
    save_session(path, with_runs(shown, tree_runs(served, make)))
    return path


def test_a_saved_session_keeps_the_served_tree(served, tmp_path):
    """Reopened without the server, the tree and every branch's tokens, log-probabilities and
    alternatives are the ones shown."""
    from llm_lens.core.runs.branching import session_nodes
    from llm_lens.core.sessions.read import load_session

    bench = Workbench(served)
    path = saved_tree(served, bench, tmp_path)
    served.endpoint = Endpoint("http://127.0.0.1:9/")  # the server gone
    back = load_session(path)
    assert back.shown_index == 0 and back.runs[0].run_id == 3  # the shown branch stays shown
    shown = tree_of(served).all()
    nodes = {n.run_id: n for n in session_nodes(back.runs)}
    assert sorted(nodes) == [1, 2, 3]
    for node in shown:
        again = nodes[node.run_id]
        assert (again.parent_run_id, again.branch_step, again.depth, again.offset) == (
            node.parent_run_id, node.branch_step, node.depth, node.offset)  # fmt: skip
        assert again.forced_token == node.forced_token and again.continued == node.continued
        assert again.text == node.text
        assert again.cumulative_logprob == pytest.approx(node.cumulative_logprob, rel=1e-6)
    for run in back.runs:
        kept = tree_of(served).runs[run.run_id]
        assert [s.token for s in run.steps] == [s.token for s in kept.steps]
        assert [s.logprob for s in run.steps] == pytest.approx([s.logprob for s in kept.steps])
        for a, b in zip(run.steps, kept.steps, strict=True):
            assert a.top_texts == b.top_texts and list(a.top_ids) == list(b.top_ids)
            assert list(a.top_probs) == pytest.approx(list(b.top_probs), rel=1e-6)
    assert back.runs[0].label.startswith("branch at step 3, forced")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda r: r.__setitem__("parent", [99, 1]), "not another run of the file"),
        (lambda r: r.__setitem__("parent", [2, 40]), "past the steps"),
        (lambda r: r["steps"][0]["token"].__setitem__("text", "x"), "are not run 2's"),
    ],
)
def test_a_corrupted_tree_entry_is_one_line(served, tmp_path, change, said):
    import json
    import zipfile

    from llm_lens.core.sessions.format import SessionError
    from llm_lens.core.sessions.read import load_session

    path = saved_tree(served, Workbench(served), tmp_path)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    change(manifest["runs"][0])  # the branch of a branch (run 3, from run 2 at step 3)
    members["manifest.json"] = json.dumps(manifest).encode()
    bad = tmp_path / "bad.llmlens"
    with zipfile.ZipFile(bad, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    with pytest.raises(SessionError, match=said) as caught:
        load_session(bad)
    assert "\n" not in str(caught.value)


def test_a_reopened_tree_tells_a_continuation_by_text_where_the_server_sent_no_ids():
    """A server that names texts only (ids -1): a branch is a continuation when its forced
    text is the one its parent chose, not because both ids are -1."""
    from dataclasses import replace

    from llm_lens.core.engines.openai.records import StepPlace, step_record
    from llm_lens.core.engines.openai.stream import ServedToken
    from llm_lens.core.runs.branching import session_nodes
    from tests.core.sessions.test_assemble import run as session_run

    def steps(*texts):  # a text-only server's steps (no ids, no alternatives)
        place = StepPlace(0, 0, 0, ())
        tokens = (ServedToken(t, t.encode(), -1.0, (), 0.0) for t in texts)
        return tuple(step_record(t, place, 0.0, 0.0) for t in tokens)

    root = replace(session_run(1), steps=steps(" a", " b"))
    other = replace(session_run(2, (1, 1)), steps=steps(" a", " c", " d"))
    same = replace(session_run(3, (1, 1)), steps=steps(" a", " b", " e"))
    nodes = {n.run_id: n for n in session_nodes([root, other, same])}
    assert not nodes[2].continued and nodes[3].continued
    assert nodes[2].text == " d" and nodes[2].forced_token.text == " c"
