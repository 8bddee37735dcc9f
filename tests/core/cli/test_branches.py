"""``llm-lens trace --branch``: branches grown headless and saved as one tree."""

from __future__ import annotations

from llm_lens.core.cli import main
from tests.core.cli.test_trace import _trace


def test_trace_branches_and_saves_the_tree(tmp_path, loaded):
    """``--branch`` grows branches with the same history the window uses; ``--session`` keeps
    the whole tree, each branch's parent pointing at the step it left."""
    from llm_lens.core.sessions.read import load_session

    session = tmp_path / "tree.llmlens"
    prompt = "Explain transformers like I am 12"
    greedy = ("--greedy", "--max-new-tokens", "4")
    plain = _trace(tmp_path, prompt, *greedy)
    forced = plain["steps"][2]["top"][1]["id"]  # the runner-up at step 2
    data = _trace(tmp_path, prompt, *greedy, "--branch", f"2:{forced}", "--session", str(session))
    (branch,) = data["branches"]
    assert [s["token_id"] for s in branch["steps"][:2]] == [
        s["token_id"] for s in plain["steps"][:2]
    ]
    assert branch["steps"][2]["token_id"] == forced and len(branch["steps"]) == 2 + 1 + 4
    runs = load_session(session).runs
    assert len(runs) == 2 and runs[0].parent is None and runs[1].parent == (runs[0].run_id, 2)
    assert [s.token.id for s in runs[1].steps] == [s["token_id"] for s in branch["steps"]]
    assert main(["trace", prompt, *greedy, "--quiet", "--branch", "9:x"]) == 2  # no step 9
