"""Compare columns under the What-if changes: a clean and an intervened column side by side.

References: a clean run and an intervened run (what ``llm-lens trace --intervene`` makes) of the
same prompt, each started on its own.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_lens.core.errors import SamplingError
from llm_lens.core.interventions import Forget, HeadEdit, ResidualAdd, parse_spec
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.runs.compare import changes_prompt, compare
from llm_lens.core.runs.jobs import compare_job
from llm_lens.core.sampling import GREEDY

CONFIG = RunConfig(max_new_tokens=5)


def _alone(engine, prompt, changes=()):
    run = engine.start(prompt, GREEDY, CONFIG, interventions=changes)
    run.run_all()
    return run


def test_only_edits_after_the_prompt_share_its_prefill():
    assert changes_prompt([HeadEdit(0, 1)], 4)
    assert changes_prompt([Forget(2)], 4)
    assert changes_prompt([ResidualAdd(0, (), (1.0,))], 4)  # every position: the prompt too
    assert changes_prompt([ResidualAdd(0, (3, 5), (1.0,))], 4)
    assert not changes_prompt([ResidualAdd(0, (4, 5), (1.0,)), Forget(6)], 4)


def test_a_head_off_column_reads_its_own_prefill_and_equals_an_intervened_trace(tiny_engine):
    prompt = tiny_engine.tokenize("Once upon a time", chat=False)
    changes = (parse_spec("head:1.0=0"), parse_spec("attn:0=0"))
    comp = compare(tiny_engine, prompt, [GREEDY, GREEDY], CONFIG, interventions=[(), changes])
    assert comp.own_prefill == (False, True)
    assert comp.prefill_saved_ms == 0.0  # one column shares the prefill with nobody
    clean, changed = _alone(tiny_engine, prompt), _alone(tiny_engine, prompt, changes)
    assert comp.runs[0].generated_ids == clean.generated_ids
    assert comp.runs[1].generated_ids == changed.generated_ids
    assert comp.runs[1].interventions == changes and not comp.runs[0].interventions
    for col, ref in ((comp.runs[0], clean), (comp.runs[1], changed)):
        np.testing.assert_allclose(col.steps[-1].logits, ref.steps[-1].logits, atol=1e-4)
    assert not np.allclose(comp.runs[0].steps[0].logits, comp.runs[1].steps[0].logits, atol=1e-3)


def test_a_change_after_the_prompt_forks_the_shared_prefill(tiny_engine):
    prompt = tiny_engine.tokenize("Once upon a time", chat=False)
    hidden = tiny_engine.model.config.hidden_size
    push = (ResidualAdd(1, (len(prompt), len(prompt) + 1), tuple([4.0] * hidden)),)
    comp = compare(tiny_engine, prompt, [GREEDY, GREEDY], CONFIG, interventions=[(), push])
    assert comp.own_prefill == (False, False)
    assert comp.prefill_saved_ms == comp.shared_prefill_ms > 0
    clean, pushed = _alone(tiny_engine, prompt), _alone(tiny_engine, prompt, push)
    assert comp.runs[0].generated_ids == clean.generated_ids
    assert comp.runs[1].generated_ids == pushed.generated_ids
    np.testing.assert_array_equal(comp.runs[0].steps[0].logits, comp.runs[1].steps[0].logits)
    np.testing.assert_allclose(comp.runs[1].steps[1].logits, pushed.steps[1].logits, atol=1e-4)
    assert not np.allclose(comp.runs[0].steps[1].logits, comp.runs[1].steps[1].logits, atol=1e-3)


def test_the_compare_job_says_which_columns_read_their_own_prefill(tiny_engine):
    import threading
    from types import SimpleNamespace

    kept: dict[int, object] = {}
    bench = SimpleNamespace(engine=tiny_engine, cancel=threading.Event(),
                            store=SimpleNamespace(keep=kept.__setitem__))  # fmt: skip
    changes = (HeadEdit(0, 0),)
    job = compare_job("Once upon a time", False, [GREEDY, GREEDY], 2, [7, 8], lambda b: None,
                      interventions=[(), changes])  # fmt: skip
    items = list(job(bench))
    start = items[0][1]
    assert items[0][0] == "compare_started"
    assert start.interventions == ((), changes) and start.own_prefill == (False, True)
    assert kept[8].interventions == changes
    with pytest.raises(SamplingError, match="3 intervention lists for 2 columns"):
        list(compare_job("hi", False, [GREEDY] * 2, 2, [1, 2], lambda b: None,
                         interventions=[()] * 3)(bench))  # fmt: skip
