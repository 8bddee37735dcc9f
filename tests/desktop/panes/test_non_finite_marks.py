"""The Timing and Layer stack panes mark where the model computed NaN: the controller reads the
worker's one line (a real NonFiniteError of a tiny model with NaN in one MLP) into a
``NonFinite`` record, and both panes draw it at that layer and step."""

from __future__ import annotations

import pytest
import torch

from llm_lens.core.errors import NonFiniteError
from llm_lens.core.loop.engine import Engine, RunConfig
from llm_lens.core.sampling import GREEDY
from tests.conftest import make_tiny


def _real_error(tokenizer) -> NonFiniteError:
    loaded = make_tiny(tokenizer, num_hidden_layers=3)
    with torch.no_grad():
        loaded.model.model.layers[1].mlp.down_proj.weight[2, 2] = float("nan")
    engine = Engine(loaded)
    run = engine.start(engine.tokenize("hi"), GREEDY, RunConfig(max_new_tokens=2))
    with pytest.raises(NonFiniteError) as caught:
        run.run_all()
    return caught.value


def test_panes_mark_the_layer_and_sublayer(qtbot, bare, tokenizer):
    from llm_lens.desktop.panes.layers import LayerStackPane
    from llm_lens.desktop.panes.timing import TimingPane

    line = str(_real_error(tokenizer))
    layers, timing = LayerStackPane(bare), TimingPane(bare)
    qtbot.addWidget(layers)
    qtbot.addWidget(timing)
    assert bare.non_finite is None and not layers.non_finite_label.isVisibleTo(layers)
    bare._on_error("run", line)  # what the worker's sig_error("run", line) brings
    placed = bare.non_finite
    assert (placed.layer, placed.sublayer, placed.step, placed.value) == (1, "MLP", 0, "NaN")
    assert [line.value() for line in layers.non_finite_lines] == [2, 2]  # layer 1's output
    assert all(line.isVisible() for line in layers.non_finite_lines)
    assert "layer 1's MLP" in layers.non_finite_label.text()
    assert timing.non_finite_line.value() == 0 and timing.non_finite_line.isVisible()
    assert "NaN first in layer 1's MLP (step 0)" in timing.non_finite_label.text()

    bare.sig_non_finite.emit(None)  # a new run starts: the marks go
    assert not timing.non_finite_line.isVisible()
    assert not any(line.isVisible() for line in layers.non_finite_lines)


def test_other_errors_mark_nothing(qtbot, bare):
    bare._on_error("run", "these settings make the distribution NaN; temperature=0.7")
    assert bare.non_finite is None
