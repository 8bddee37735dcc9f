"""The CUDA default is bfloat16 weights: every path a pane or a session uses must work with them.

No GPU here, so the tiny Llama runs in bfloat16 on the CPU, which exercises the same dtype
conversions (hidden states back into the model, float32 records out of it).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_lens.core import attention, embeddings, layers
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.runs.branching import branch, continue_run
from llm_lens.core.runs.resume import revive
from llm_lens.core.sampling import SamplingParams
from llm_lens.core.sessions.format import session_from_run
from tests.conftest import make_tiny


@pytest.fixture(scope="module")
def bf16_engine(loaded):
    tiny = make_tiny(loaded.tokenizer)
    tiny.model.to(torch.bfloat16)
    return Engine(tiny)


def test_a_bfloat16_model_runs_every_view(bf16_engine):
    eng = bf16_engine
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=1)
    run = eng.start(eng.tokenize("Once upon a time", chat=False), params, RunConfig(6))
    steps = run.run_all()
    assert len(steps) == 6
    for s in steps:
        assert s.logits.dtype == np.float32 and np.isfinite(s.logits).all()
        assert np.allclose(s.attention.sum(-1), 1, atol=1e-2)  # each head's row is a distribution
    lens = layers.logit_lens(eng, steps[2], 5)
    assert lens.top_ids.shape == (eng.info.num_layers + 1, 5)
    assert int(lens.top_ids[-1, 0]) == int(steps[2].top_ids[0])  # the last layer is the model
    amap = attention.attention_map(eng, run.cache, run.prefill.hidden, 1, 2)
    assert np.allclose(amap.weights.sum(-1), 1, atol=1e-2)
    assert layers.prompt_lens(eng, run.prefill.hidden).top1_ids.shape[1] == len(run.prompt)
    assert embeddings.embedding_projection(eng).coords.shape == (eng.info.vocab_size, 2)

    child = continue_run(eng, run, RunConfig(3))
    child.run_all()
    other = branch(eng, run, 2, int(steps[2].top_ids[1]), params, RunConfig(3))
    other.run_all()
    revived = revive(eng, session_from_run(run, eng.info))
    assert revived.matches and revived.run.cache.get_seq_length() == len(steps[-1].context_ids)
