"""The Compare and Branches views' requests when the model is behind a server: the jobs of
:mod:`llm_lens.core.runs.served_compare` and :mod:`~llm_lens.core.runs.served_branches`,
or the one line why a request cannot go.

Plain functions of the controller's state, asked by the
:class:`~llm_lens.desktop.state.compare_controller.CompareController` when the loaded model is
served (``served(ctl)``); a line leaves as its ``sig_error(kind, line)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

BEAM_LINE = (
    "beam search needs every beam's whole distribution at each step from one forked cache: a "
    "server keeps no cache to fork and returns its top alternatives only; open the model "
    "locally (File → Open model) for beams"
)
CHAT_LINE = (
    "a served chat run cannot be branched: the server applies its chat template, so the text "
    "so far is unknown; untick chat and run the prompt raw to branch it"
)


def served(ctl: Any) -> bool:
    """Whether the loaded model is behind a server (File → Open server…)."""
    return getattr(ctl.model_info, "architecture", "") == "served"


def compare_job(
    ctl: Any, text: str, chat: bool, configs: list[Any], max_new: int, ids: list[int],
    drop: Any, samples: bool, interventions: Sequence[Sequence[Any]],
) -> tuple[Any, str]:  # fmt: skip
    """(the served comparison's job, "") or (None, why it cannot run)."""
    if any(interventions):
        return None, ctl.why_not("interventions") or "a server runs its model unchanged"
    from llm_lens.core.runs.served_compare import served_compare_job

    return served_compare_job(text, chat, configs, max_new, ids, drop, samples), ""


def branch_job(
    ctl: Any, step: int | None, token_id: int | None, token_text: str | None, max_new: int,
    new_id: int,
) -> tuple[Any, str]:  # fmt: skip
    """(the job that branches the shown served run at ``step`` with the alternative
    ``token_text`` (or, without it, the listed one of id ``token_id``), "") or (None, why
    not). ``step`` None: the run goes on (its last token forced again)."""
    prompt = ctl.prompt
    if prompt is not None and prompt.chat:
        return None, CHAT_LINE
    continued = step is None
    step = len(ctl.steps) - 1 if step is None else step
    shown = ctl.steps[step]
    if continued or (token_text is None and token_id == shown.token.id):
        token_text = shown.token.text
    elif token_text is None and token_id is not None and token_id >= 0:  # ids, where sent
        listed = dict(zip((int(i) for i in shown.top_ids), shown.top_texts, strict=True))
        token_text = listed.get(token_id)
    if token_text is None:
        return None, "pick one of the alternatives the server returned"
    from llm_lens.core.runs.served_branches import served_branch_job

    job = served_branch_job(ctl.run_id, step, token_text, max_new, new_id, continued)
    return job, ""


def alternatives(ctl: Any, k: int) -> list[Any]:
    """The selected step's alternatives as the server returned them (no after-sampling
    probability: the server returns no logits to apply the sampler to)."""
    from llm_lens.core.runs.served_branches import served_alternatives

    step = ctl.current_step()
    return [] if step is None else served_alternatives(step, k)
