"""The analysis budget and the work ahead as plain policy: which queued job may run between a
run's steps, how costs are estimated, which request supersedes which, and which guesses come next.
No model and no thread: the jobs are never called here."""

from __future__ import annotations

from types import SimpleNamespace

from llm_lens.core.runs import budget
from llm_lens.core.runs.budget import ANALYSIS_SHARE, AnalysisQueue, decode_ms


def nothing(_bench: object) -> None:
    return None


def other(_bench: object) -> None:
    return None


def kinds(queue: AnalysisQueue, budget_ms: float | None) -> list[str]:
    """The kinds ``next_job`` hands out with this budget, until it hands out none."""
    out = []
    while (taken := queue.next_job(budget_ms)) is not None:
        out.append(taken[0][0])
    return out


def test_a_newer_per_step_request_drops_the_pending_one_of_its_kind():
    queue = AnalysisQueue()
    assert queue.submit("lens", ("lens", 1), nothing) == []
    assert queue.submit("prompt_lens", ("prompt_lens",), nothing) == []
    assert queue.submit("lens", ("lens", 2), nothing, (other,)) == [("lens", ("lens", 1))]
    assert queue.submit("prompt_lens", ("prompt_lens", 2), nothing) == []  # not per step
    (first, ahead1), (second, ahead2) = queue.next_job(None), queue.next_job(None)
    assert first[1] == ("prompt_lens",) and ahead1 == ()
    assert second[1] == ("lens", 2) and ahead2 == (other,)
    assert queue.waiting()


def test_without_a_budget_the_oldest_runs_whatever_its_cost():
    queue = AnalysisQueue()
    queue.cost_ms = {"attention_overview": 5_000.0}
    queue.submit("attention_overview", ("overview",), nothing)
    queue.submit("never_timed", ("x",), nothing)
    assert kinds(queue, None) == ["attention_overview", "never_timed"]
    assert not queue.waiting()


def test_between_steps_only_what_fits_the_share_of_decode_time_runs():
    queue = AnalysisQueue()
    queue.new_job()
    queue.cost_ms = {"lens": 0.5, "attention_overview": 5_000.0}
    queue.submit("attention_overview", ("overview",), nothing)
    queue.submit("never_timed", ("x",), nothing)  # a kind never timed: too dear to guess
    queue.submit("lens", ("lens", 1), nothing)
    prefill = queue.step(position=40, decode_ms=0.0)  # the prefill earns nothing
    assert prefill == 0.0 and kinds(queue, prefill) == []
    allowed = queue.step(position=41, decode_ms=20.0)
    assert allowed == ANALYSIS_SHARE * 20.0 and queue.context_tokens == 42
    assert kinds(queue, allowed) == ["lens"]  # the cheap one, passing the older dear ones
    queue.timed("lens", 0.5)
    assert queue.analysis_ms == 0.5 and kinds(queue, allowed) == []
    assert kinds(queue, None) == ["attention_overview", "never_timed"]


def test_the_prefill_adds_no_decode_time():
    prefill = SimpleNamespace(index=0, timing=SimpleNamespace(total_ms=1000.0))
    step = SimpleNamespace(index=1, timing=SimpleNamespace(total_ms=10.0))
    assert decode_ms(prefill) == 0.0 and decode_ms(step) == 10.0


def test_a_cost_timed_on_a_short_context_grows_with_a_longer_one():
    queue = AnalysisQueue()
    queue.cost_ms, queue.cost_tokens = {"attention_map": 20.0}, {"attention_map": 40}
    queue.step(position=999, decode_ms=10.0)
    assert queue.expected_ms("attention_map") == 20.0 * 1000 / 40
    queue.cost_tokens["attention_map"] = 2000  # timed on a longer one: not cheaper here
    assert queue.expected_ms("attention_map") == 20.0
    assert queue.expected_ms("lens") == float("inf")


def test_a_memo_hit_leaves_half_the_estimate_and_a_slow_answer_replaces_it():
    queue = AnalysisQueue()
    queue.timed("attention_map", 200.0)
    queue.timed("attention_map", 0.0)  # answered from a memo: no time at all
    assert queue.cost_ms["attention_map"] == 100.0
    queue.timed("attention_map", 300.0)
    assert queue.cost_ms["attention_map"] == 300.0 and queue.analysis_ms == 500.0
    assert queue.cost_tokens["attention_map"] == queue.context_tokens


def test_guesses_follow_a_slow_kind_answered_while_idle_and_a_new_job_drops_them():
    queue = AnalysisQueue()
    quick, slow = budget.AHEAD_AFTER_MS / 2, budget.AHEAD_AFTER_MS
    queue.answered("attention_map", quick, (nothing,), between_steps=False)
    assert queue.next_guess() is None  # nothing of this kind took long yet
    queue.answered("attention_map", slow, (nothing, other), between_steps=True)
    assert queue.next_guess() is None and "attention_map" in queue.slow  # a run keeps its steps
    queue.answered("attention_map", 0.0, (nothing, other), between_steps=False)  # a memo hit
    guess = queue.next_guess()
    assert guess == ("attention_map", nothing)
    queue.guessed(guess, quick)
    assert queue.next_guess() == ("attention_map", other)
    queue.answered("attention_map", slow, (other,), between_steps=False)  # replaced meanwhile
    queue.guessed(guess, quick)  # the old first: nothing more is popped
    assert queue.ahead == [("attention_map", other)]
    queue.new_job()
    assert queue.next_guess() is None and not queue.slow and queue.analysis_ms == 0.0


def test_a_slow_guess_marks_its_kind_slow():
    queue = AnalysisQueue()
    queue.ahead = [("attention_map", nothing)]
    queue.guessed(queue.ahead[0], budget.AHEAD_AFTER_MS)
    assert queue.slow == {"attention_map"} and queue.ahead == []


def test_a_dropped_request_takes_its_guesses_with_it():
    queue = AnalysisQueue()
    queue.submit("attention_map", ("map", 1), nothing, (other,))
    queue.submit("attention_map", ("map", 2), nothing)
    ((kind, key, _job), ahead) = queue.next_job(None)
    assert key == ("map", 2) and ahead == ()
