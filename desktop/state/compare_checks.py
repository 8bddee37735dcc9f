"""Why a comparison, beam search, branch or continuation cannot start now: one line, or "".

Plain functions of the controller's state, asked by the
:class:`~llm_lens.desktop.state.compare_controller.CompareController` before it queues a job;
the line leaves as its ``sig_error(kind, line)``.
"""

from __future__ import annotations

from typing import Any

MIN_SAMPLES = 2  # the view compares runs: one sample has nothing to compare with


def job_problem(ctl: Any, kind: str) -> str:
    """Why a comparison or beam search (``kind``) cannot run on the loaded model."""
    if ctl.model_info is None:
        return "no model is loaded yet"
    if kind == "beam" and getattr(ctl.model_info, "architecture", "") == "served":
        from llm_lens.desktop.state.compare_served import BEAM_LINE

        return BEAM_LINE
    return ""


def samples_problem(k: int, seed: int) -> str:
    """Why ``k`` samples with seeds ``seed`` … ``seed + k − 1`` cannot be compared."""
    from llm_lens.core.sampling import MAX_SAMPLES

    if not MIN_SAMPLES <= k <= MAX_SAMPLES:
        return f"samples must be between {MIN_SAMPLES} and {MAX_SAMPLES}; got {k}"
    if seed < 0:
        return f"seed must be ≥ 0; got {seed}"
    return ""


def grow_problem(ctl: Any, step: int) -> str:
    """Why the shown run cannot be branched at ``step`` (or continued from it) now."""
    if ctl.model_info is None:
        return "no model is loaded yet"
    if ctl.recorded is not None and not ctl.model_matches():
        info = ctl.info
        return (f"this run was recorded with {info.name} (weights {info.weights_id[:12]}): "
                "load that model to continue or branch it")  # fmt: skip
    if ctl.busy:
        return "wait for the running generation to finish (or stop it) first"
    if not 0 <= step < len(ctl.steps):
        return "select a step of a run first"
    return ""


def continue_problem(ctl: Any) -> str:
    """Why the shown run cannot go on: a branch's problems, or a run that cannot grow (it
    ended on its end-of-text token, or fills the model's context)."""
    from llm_lens.core.runs import branching

    problem = grow_problem(ctl, len(ctl.steps) - 1)
    reason = ctl.summary.finish_reason if ctl.summary is not None else None
    if not problem:
        problem = branching.continue_problem(len(ctl.steps), reason, ctl.info.context_length)
    return problem
