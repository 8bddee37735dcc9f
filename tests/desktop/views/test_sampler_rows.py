"""desktop.views.sampler_rows: a configuration row of the Compare view, its presets (as
``llm-lens compare`` reads them) and the column header naming its settings."""

from __future__ import annotations

import pytest

from llm_lens.core.sampling import SamplingError, SamplingParams
from llm_lens.desktop.views.sampler_rows import (
    CUSTOM,
    SamplerRow,
    describe_params,
    preset_values,
)


def test_a_preset_is_its_settings_over_the_neutral_ones():
    assert preset_values("factual") == {
        "temperature": 0.2,
        "top_k": 0,
        "top_p": 0.95,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "seed": 0,
        "greedy": False,
    }
    assert preset_values("greedy")["greedy"] is True


def test_a_header_names_the_preset_or_each_active_setting():
    creative = SamplingParams(temperature=0.9, top_k=0, top_p=0.9, seed=4)
    assert describe_params(creative) == "creative: T 0.9, top-p 0.9 · seed 4"
    custom = SamplingParams(temperature=0.7, top_k=40, top_p=0.8, min_p=0.05, seed=None)
    assert describe_params(custom) == "T 0.7 · top-k 40 · top-p 0.8 · min-p 0.05 · seed None"
    rep = SamplingParams(temperature=0.0, top_p=1.0, repetition_penalty=1.3, greedy=True, seed=1)
    assert describe_params(rep) == "greedy · rep 1.3 · seed 1"


def test_a_row_fills_in_its_preset_and_becomes_custom_when_edited(qtbot):
    row = SamplerRow(2, "creative")
    qtbot.addWidget(row)
    changed: list[int] = []
    row.sig_changed.connect(lambda: changed.append(1))
    assert row.number.text() == "#2" and row.preset_name() == "creative"
    assert row.params() == SamplingParams(temperature=0.9, top_k=0, top_p=0.9, seed=0)
    row.boxes["seed"].setValue(7)  # the seed is not part of a preset
    assert row.preset_name() == "creative" and changed == [1]
    row.boxes["top_k"].setValue(5)
    assert row.preset_name() == CUSTOM and len(changed) == 2
    assert row.params().top_k == 5 and row.params().seed == 7
    row.boxes["top_k"].setValue(0)  # back to the preset's values: named again
    assert row.preset_name() == "creative"
    row.set_preset("greedy")
    assert row.params().greedy and row.values()["seed"] == 7  # the seed is kept
    row.set_number(3)
    assert row.number.text() == "#3"


def test_a_row_out_of_range_raises_a_plain_message(qtbot):
    row = SamplerRow(1)
    qtbot.addWidget(row)
    row.boxes["top_p"].setValue(0.0)
    with pytest.raises(SamplingError, match="top"):
        row.params()


def test_the_remove_button_asks_the_view(qtbot):
    row = SamplerRow(1)
    qtbot.addWidget(row)
    with qtbot.waitSignal(row.sig_remove, timeout=1000):
        row.remove.click()
