"""The Compare view's served job against a real llama.cpp server: each column's tokens and
log-probabilities are the server's own reply to that column's request; K seeded samples too;
the dashed curves come from the returned alternatives; a server that fails keeps what each
column received and says its one line."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from llm_lens.core.engines.openai import Endpoint, OpenAIEngine
from llm_lens.core.engines.openai.client import ServerError
from llm_lens.core.runs.served_compare import (
    NO_KL,
    SOLID_MISSING,
    ServedCompareOutcome,
    ServedCompareStart,
    own_curves,
    served_compare_job,
)
from llm_lens.core.runs.workbench import Workbench
from llm_lens.core.sampling import GREEDY, SamplingParams
from tests.core.engines.openai.conftest import llama_server  # noqa: F401 (the fixture)
from tests.core.engines.openai.fake_server import Fake, serving
from tests.core.engines.openai.test_llama_server import non_streamed

SETTINGS = [GREEDY, SamplingParams(temperature=0.9, top_p=0.9, seed=5)]


@pytest.fixture(scope="module")
def served(llama_server):  # noqa: F811
    return OpenAIEngine(Endpoint(llama_server), None, top_logprobs=4)


def run_job(engine, text, chat, settings, max_new=6, samples=False):
    bench = Workbench(engine)
    ids = list(range(101, 101 + len(settings)))
    items = list(served_compare_job(text, chat, settings, max_new, ids, lambda b: None,
                                    samples)(bench))  # fmt: skip
    return bench, ids, items


def columns_of(items, n):
    cols: list[list] = [[] for _ in range(n)]
    for tag, payload in items:
        if tag == "compare_step":
            cols[payload[0]].append(payload[1])
    return cols


def test_each_column_is_the_servers_reply_to_its_request(served):
    bench, ids, items = run_job(served, "Once upon a time", False, SETTINGS)
    tags = [t for t, _ in items]
    assert tags[0] == "compare_started" and tags[-1] == "compare_done"
    start, outcome = items[0][1], items[-1][1]
    assert isinstance(start, ServedCompareStart) and start.exact == (False, False)
    assert start.where == served.endpoint.public and start.top_n == 4
    cols = columns_of(items, 2)
    for column, run_id in enumerate(ids):
        run = bench.store.kept[run_id]  # kept: "show in panes" finds it
        assert [s.run_id for s in cols[column]] == [run_id] * len(cols[column])
        reply = non_streamed(served, run)["logprobs"]
        assert [s.token.text for s in cols[column]] == reply["tokens"]
        assert [s.logprob for s in cols[column]] == pytest.approx(reply["token_logprobs"],
                                                                  abs=1e-4)  # fmt: skip
    assert isinstance(outcome, ServedCompareOutcome)
    assert outcome.errors == (None, None) and outcome.finish_reasons == ("length", "length")
    assert [c.length for c in outcome.columns] == [6, 6]
    assert outcome.kl_per_step == () and SOLID_MISSING in outcome.curves_note
    assert "approximate" in outcome.curves_note
    texts = [[s.token.raw for s in c] for c in cols]
    diverged = next((i for i, pair in enumerate(zip(*texts, strict=True))
                     if pair[0] != pair[1]), None)  # fmt: skip
    assert outcome.divergence_step == diverged


def test_k_samples_are_each_seeds_own_reply(served):
    params = SamplingParams(temperature=1.2, seed=0)
    seeds = [params.with_(seed=s) for s in (3, 4, 5)]
    bench, ids, items = run_job(served, "The best fruit is", False, seeds, 5, samples=True)
    assert items[0][1].samples
    cols = columns_of(items, 3)
    for column, run_id in enumerate(ids):
        alone = served.start(bench.store.kept[run_id].prompt, seeds[column],
                             bench.store.kept[run_id].config)  # fmt: skip
        alone.run_all()
        assert [s.token.text for s in cols[column]] == [s.token.text for s in alone.steps]


def test_own_curves_from_a_whole_distribution_are_exact():
    from llm_lens.core.records import frozen

    def step(texts, probs):
        return SimpleNamespace(
            top_ids=frozen([-1] * len(texts), np.int64), top_texts=tuple(texts),
            top_probs=frozen(probs, np.float32), approximate=False,
        )  # fmt: skip

    a = SimpleNamespace(steps=[step(["x", "y"], [0.75, 0.25])])
    b = SimpleNamespace(steps=[step(["y", "x"], [0.5, 0.5])])
    kl, overlap = own_curves([a, b])
    expected = 0.5 * (0.75 * math.log(1.5) + 0.25 * math.log(0.5)
                      + 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(2.0))  # fmt: skip
    assert kl[0] == pytest.approx(expected, rel=1e-5) and overlap[0] == pytest.approx(0.75)
    b.steps = [SimpleNamespace(**{**vars(b.steps[0]), "approximate": True})]
    assert math.isnan(own_curves([a, b])[0][0])  # top alternatives only: no KL


def test_own_curves_from_the_returned_alternatives(served):
    bench, ids, items = run_job(served, "The capital of France is", False, [GREEDY, GREEDY], 4)
    outcome = items[-1][1]
    runs = [bench.store.kept[i] for i in ids]
    # the same request twice: equal alternatives, so overlap = the listed mass; no KL from
    # the top alternatives only
    assert all(math.isnan(v) for v in outcome.own_kl_per_step) and NO_KL in outcome.curves_note
    listed = [float(np.sum(s.top_probs)) for s in runs[0].steps]
    assert outcome.own_overlap_per_step == pytest.approx(listed, rel=1e-6)
    assert outcome.divergence_step is None
    kl, overlap = own_curves(runs[:1])  # one column: nothing to compare
    assert all(math.isnan(v) for v in (*kl, *overlap))


@pytest.mark.parametrize("mode", ["cut", "malformed"])
def test_a_stream_failing_mid_run_keeps_each_columns_token(mode):
    fake = Fake()
    with serving(fake) as url:
        engine = OpenAIEngine(Endpoint(url), None)
        fake.mode = mode
        _, _, items = run_job(engine, "Hi", True, SETTINGS)
    outcome = items[-1][1]
    assert [[s.token.text for s in c] for c in columns_of(items, 2)] == [["Hello"], ["Hello"]]
    assert outcome.finish_reasons == ("error", "error")
    assert all(e and "\n" not in e for e in outcome.errors)


@pytest.mark.parametrize("mode", ["401", "400"])
def test_a_refused_request_is_one_line(mode):
    fake = Fake()
    with serving(fake) as url:
        engine = OpenAIEngine(Endpoint(url), None)
        fake.mode = mode
        with pytest.raises(ServerError) as said:
            run_job(engine, "Hi", True, SETTINGS)
    assert "\n" not in str(said.value)


def test_a_timeout_is_one_line_per_column():
    fake = Fake()
    with serving(fake) as url:
        engine = OpenAIEngine(Endpoint(url, None, 0.5), None)
        fake.mode = "slow"
        _, _, items = run_job(engine, "Hi", True, SETTINGS)
    outcome = items[-1][1]
    assert [len(c) for c in columns_of(items, 2)] == [1, 1]  # "Hello" came before the pause
    assert all(e and "\n" not in e for e in outcome.errors)
