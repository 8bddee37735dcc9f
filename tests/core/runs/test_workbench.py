"""A Workbench driven without Qt, as a script or notebook does: the live run's tokens against
transformers' own greedy generate(), prefix reuse giving the steps a fresh run gives, and the
comparison and branch jobs run on the same workbench."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.runs.flags import WorkerFlags
from llm_lens.core.runs.jobs import ShownRun, compare_job, grow_job, register_job
from llm_lens.core.runs.workbench import RunRequest, Workbench
from llm_lens.core.sampling import GREEDY, SamplingParams

TEXT = "the cat sat on the mat and looked at the"


def items(job) -> list[tuple[str, object]]:
    with torch.inference_mode():
        return list(job)


def of(tag: str, got: list[tuple[str, object]]) -> list[object]:
    return [payload for t, payload in got if t == tag]


def test_a_live_run_is_the_models_own_greedy_generation(tiny_engine, tiny):
    bench = Workbench(tiny_engine)
    got = items(bench.live(RunRequest(7, TEXT, False, GREEDY, RunConfig(max_new_tokens=10))))
    tags = [t for t, _ in got]
    assert tags[:3] == ["run_started", "prefill", "step"] and "prefix_reused" not in tags
    assert tags[-2:] == ["run_finished", "history"]
    prompt, steps = of("run_started", got)[0], of("step", got)
    ids = torch.tensor([prompt.ids])
    with torch.inference_mode():
        greedy = dict(do_sample=False, temperature=None, top_k=None, top_p=None)
        out = tiny.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10,
                                  **greedy)  # fmt: skip
    expected = out[0, ids.shape[1] :].tolist()
    assert [s.token.id for s in steps] == expected
    shown, nodes = of("history", got)[0]
    assert isinstance(shown, ShownRun) and shown.run_id == 7 and len(shown.steps) == len(steps)
    assert [n.run_id for n in nodes] == [7]
    assert bench.store.kept[7] is bench.store.runs[7]  # it answers analyses and is kept


def test_prefix_reuse_gives_the_steps_of_a_fresh_run(tiny_engine):
    flags = WorkerFlags()
    flags.set_reuse_prefix(True)
    bench = Workbench(tiny_engine, flags)
    config = RunConfig(max_new_tokens=5)
    first = items(bench.live(RunRequest(1, TEXT, False, GREEDY, config)))
    assert of("prefix_reused", first) == [(0, 0.0)]  # nothing to reuse yet
    edited = TEXT + " dog by the door"
    reused = items(bench.live(RunRequest(2, edited, False, GREEDY, config)))
    fresh = items(Workbench(tiny_engine).live(RunRequest(3, edited, False, GREEDY, config)))
    ((tokens, saved_ms),) = of("prefix_reused", reused)
    prompt = of("run_started", reused)[0]
    assert len(of("run_started", first)[0]) - 1 <= tokens < len(prompt) and saved_ms >= 0.0
    mine, ref = of("step", reused), of("step", fresh)
    assert [s.token.id for s in mine] == [s.token.id for s in ref]
    for a, b in zip(mine, ref, strict=True):
        np.testing.assert_allclose(a.logits, b.logits, atol=1e-4, rtol=1e-4)
    joined, full = of("prefill", reused)[0], of("prefill", fresh)[0]
    assert joined.hidden.shape == full.hidden.shape  # the whole prompt, read or reused
    np.testing.assert_allclose(joined.hidden, full.hidden, atol=1e-4, rtol=1e-4)


def test_prefix_reuse_off_prefills_the_whole_prompt(tiny_engine):
    bench = Workbench(tiny_engine)
    config = RunConfig(max_new_tokens=2)
    items(bench.live(RunRequest(1, TEXT, False, GREEDY, config)))
    again = items(bench.live(RunRequest(2, TEXT + " dog", False, GREEDY, config)))
    prompt, prefill = of("run_started", again)[0], of("prefill", again)[0]
    assert of("prefix_reused", again) == []
    assert prefill.positions.tolist() == list(range(len(prompt)))


def test_a_cancelled_flag_stops_the_live_run(tiny_engine):
    bench = Workbench(tiny_engine)
    job = bench.live(RunRequest(1, TEXT, False, GREEDY, RunConfig(max_new_tokens=20)))
    got = []
    with torch.inference_mode():
        for tag, _payload in job:
            got.append(tag)
            if got.count("step") == 3:
                bench.flags.cancel_run()
    assert got.count("step") <= 4 and "run_finished" in got


def test_the_comparison_and_branch_jobs_run_on_a_workbench(tiny_engine):
    bench = Workbench(tiny_engine)
    items(bench.live(RunRequest(1, TEXT, False, GREEDY, RunConfig(max_new_tokens=4))))
    sampled = SamplingParams(temperature=0.8, seed=3)
    job = compare_job(TEXT, False, [GREEDY, sampled], 4, [2, 3], lambda _bench: None)
    got = items(job(bench))
    assert [t for t, _ in got][0] == "compare_started" and of("compare_done", got)
    assert {2, 3} <= set(bench.store.kept)
    grown = items(grow_job(1, None, None, 3, 4)(bench))  # the live run goes on for 3 tokens
    shown, nodes = of("branch_done", grown)[0]
    assert shown.run_id == 4 and len(shown.steps) == 4 + 3
    assert {n.run_id for n in nodes} == {1, 4}
    bench.store.runs.clear()
    register_job(2)(bench)  # a kept comparison column answers analyses again
    assert bench.store.runs[2] is bench.store.kept[2]
    with pytest.raises(ValueError):
        register_job(99)(bench)


def test_a_workbench_without_a_model_says_so():
    from llm_lens.core.errors import PromptError

    bench = Workbench()
    assert not bench.loaded and bench.model_name() == "no model"
    with pytest.raises(PromptError, match="no model"):
        list(bench.live(RunRequest(1, TEXT, False, GREEDY, RunConfig())))
