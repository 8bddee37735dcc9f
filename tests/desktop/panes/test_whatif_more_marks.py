"""Embeddings, Positions, Experts, Sampling and Timing mark an intervened run and show what it
changed against the clean run of the same prompt, on a tiny random Mixtral driven through the
controller: Timing's white ticks are the clean run's step times, Sampling's white lines the
clean run's probabilities (its own logits, staged), Experts' dashed frames the choices the
forbidden expert lost, Positions strikes the forgotten token's row, Embeddings rings the clean
run's token where it chose another. A clean run again hides every mark."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from llm_lens.core.interventions import ExpertEdit, Forget
from llm_lens.core.sampling import GREEDY
from tests.core.test_experts import moe_engine
from tests.desktop.conftest import wait_result

PROMPT = "The quick brown fox jumps over the lazy dog"


@pytest.fixture
def moe_ctl(qtbot: Any, tokenizer: Any) -> Any:
    from llm_lens.desktop.state.controller import Controller

    engine = moe_engine(tokenizer)
    ctl = Controller()
    ctl.worker.workbench.engine = engine
    ctl.use_model(engine.info)
    yield ctl
    ctl.shutdown()


def _run(qtbot: Any, ctl: Any) -> None:
    with qtbot.waitSignal(ctl.sig_run_finished, timeout=120_000):
        ctl.request_run(PROMPT, False, GREEDY, 3)
    qtbot.wait(20)
    ctl.request_select(0)


def _panes(qtbot: Any, ctl: Any) -> dict[str, Any]:
    from llm_lens.desktop.panes.embeddings import EmbeddingsPane
    from llm_lens.desktop.panes.experts import ExpertsPane
    from llm_lens.desktop.panes.positions import PositionsPane
    from llm_lens.desktop.panes.sampling import SamplingPane
    from llm_lens.desktop.panes.timing import TimingPane

    made = {}
    for cls in (EmbeddingsPane, PositionsPane, ExpertsPane, SamplingPane, TimingPane):
        pane = cls(ctl)
        qtbot.addWidget(pane)
        made[cls.title] = pane
    return made


def _render(qtbot: Any, ctl: Any, panes: dict[str, Any]) -> None:
    wait_result(qtbot, ctl, "embedding_projection")
    wait_result(qtbot, ctl, "positions", positions=len(ctl.prompt))
    for pane in panes.values():
        pane.render(ctl.steps[0])


def _marks(panes: dict[str, Any]) -> dict[str, str]:
    return {title: pane.whatif_mark.text() for title, pane in panes.items()}


def test_the_five_panes_mark_the_intervened_run(qtbot: Any, moe_ctl: Any) -> None:
    ctl = moe_ctl
    panes = _panes(qtbot, ctl)
    _run(qtbot, ctl)
    clean = ctl.steps[0]
    _render(qtbot, ctl, panes)
    assert set(_marks(panes).values()) == {""}  # a clean run: no mark anywhere
    r = clean.routing  # the prompt's last token, its first MoE layer's first choice
    layer, expert = int(r.layers[0]), int(r.experts[0, -1, 0])
    ctl.whatif.add(ExpertEdit(layer, (expert,), "off"))
    ctl.whatif.add(Forget(2))
    _run(qtbot, ctl)
    step = ctl.steps[0]
    assert ctl.interventions and step.context_ids.tolist() == clean.context_ids.tolist()
    _render(qtbot, ctl, panes)
    marks = _marks(panes)
    assert all(m.startswith(f"intervened: expert {layer}.{expert} off, forget token 2 · ")
               for m in marks.values()), marks  # fmt: skip

    timing = panes["Timing"]
    xs, ys = timing.clean_ticks.getData()
    assert xs[0] == 0 and ys[0] == pytest.approx(clean.timing.wall_ms)
    assert f"the clean run's {clean.timing.wall_ms:.1f} ms" in marks["Timing"]

    sampling = panes["Sampling"]
    raw = sampling.clean_views[0]  # the clean logits staged: raw = their softmax
    p = np.exp(clean.logits - np.logaddexp.reduce(clean.logits.astype(np.float64)))
    np.testing.assert_allclose(raw.probs, p[step.top_ids[: len(raw.probs)]], rtol=1e-5)
    assert sampling.clean_bars["raw"].opts["width"] == pytest.approx(raw.probs)
    assert "in the clean run" in marks["Sampling"]

    experts = panes["Experts"]
    xs, ys = experts.clean_chosen.getData()
    assert (expert + 0.5, 0.5) in set(zip(xs, ys, strict=True))  # its lost choice, framed
    assert expert not in np.asarray(step.routing.experts[0]).ravel()  # the router obeyed
    assert "differently" in marks["Experts"]

    positions = panes["Positions"]
    assert list(positions.struck.getData()[1]) == [2.5, 2.5]
    assert "forgotten token 2" in marks["Positions"]

    embeddings = panes["Embeddings"]
    ring = embeddings.clean_dot.data["x"]
    if step.token.id == clean.token.id:
        assert len(ring) == 0 and "the same token" in marks["Embeddings"]
    else:
        coords = embeddings.projection.coords[clean.token.id]
        assert (ring[0], embeddings.clean_dot.data["y"][0]) == pytest.approx(tuple(coords))

    other = next(i for i in range(100, 200) if i != step.token.id)  # a clean run that differed
    token = SimpleNamespace(id=other, text="other")
    embeddings.clean_step = lambda _s: SimpleNamespace(token=token)
    embeddings.render(step)
    ring = (embeddings.clean_dot.data["x"][0], embeddings.clean_dot.data["y"][0])
    assert ring == pytest.approx(tuple(embeddings.projection.coords[other]))
    assert "the clean run 'other' (dashed ring)" in embeddings.whatif_mark.text()
    del embeddings.clean_step

    ctl.whatif.clear()
    _run(qtbot, ctl)
    _render(qtbot, ctl, panes)
    assert set(_marks(panes).values()) == {""}
    assert len(panes["Experts"].clean_chosen.data) == 0


def test_embeddings_note_rings_the_clean_runs_other_token() -> None:
    from llm_lens.desktop.panes.embeddings.readouts import clean_token_note

    def step(i: int, text: str) -> Any:
        return SimpleNamespace(index=1, token=SimpleNamespace(id=i, text=text))

    text, ring = clean_token_note(step(5, " Paris"), step(7, " Rome"), paths=False)
    assert ring == 7 and "' Paris', the clean run ' Rome'" in text
    assert clean_token_note(step(5, "a"), step(5, "a"), paths=False)[1] is None
    assert "residual stream" in clean_token_note(step(5, "a"), None, paths=True)[0]
