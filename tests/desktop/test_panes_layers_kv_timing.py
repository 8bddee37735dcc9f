"""Layer stack, KV cache and timing panes: they plot the records' numbers, and they export."""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QImage

from tests.desktop.conftest import wait_result

pytestmark = pytest.mark.slow


def _curve(item):
    x, y = item.getData()  # (None, None) when empty
    return np.asarray(x if x is not None else []), np.asarray(y if y is not None else [])


def _check_exports(pane, tmp_path, rows: int) -> list[list[str]]:
    """CSV has a header and ``rows`` rows; PNG loads in QImage (SVG: test_svg_export)."""
    pane.export_csv(tmp_path / "t.csv")
    with open(tmp_path / "t.csv", newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    assert tuple(table[0]) == tuple(pane.csv_table()[0])
    assert len(table) == rows + 1
    pane.export_image(tmp_path / "t.png")
    assert not QImage(str(tmp_path / "t.png")).isNull()
    return table


def test_layer_stack_norms_lens_and_prompt_heatmap(qtbot, ran, tmp_path, monkeypatch):
    from llm_lens.desktop.panes.layers import WAIT_TEXT, LayerStackPane, first_agreement, shown

    pane = LayerStackPane(ran)
    qtbot.addWidget(pane)
    step = ran.steps[2]
    ran.request_select(2)
    lens = wait_result(qtbot, ran, "lens", step=2, k=5)
    pane.render(step)

    layers = ran.info.num_layers
    x, y = _curve(pane.resid_curve)
    np.testing.assert_array_equal(x, np.arange(layers + 1))
    np.testing.assert_allclose(y, step.residual_norms)
    x, y = _curve(pane.attn_curve)
    np.testing.assert_array_equal(x, np.arange(1, layers + 1))
    np.testing.assert_allclose(y, np.linalg.norm(step.attn_update, axis=-1))
    np.testing.assert_allclose(_curve(pane.mlp_curve)[1], np.linalg.norm(step.mlp_update, axis=-1))

    # the table is the LensResult, and the final prediction is marked where it occurs
    table = pane.lens_table
    assert (table.rowCount(), table.columnCount()) == lens.top_ids.shape == (layers + 1, 5)
    first = first_agreement(lens)
    assert first is not None and lens.top_ids[first, 0] == lens.final_id == step.top_ids[0]
    for r in range(layers + 1):
        for c in range(5):
            item = table.item(r, c)
            assert item.text() == f"{shown(lens.top_texts[r][c])} ({lens.top_probs[r, c]:.2f})"
            assert item.font().bold() == (int(lens.top_ids[r, c]) == lens.final_id)
        assert table.verticalHeaderItem(r).text().endswith("★") == (r == first)
    assert pane.agree_line.isVisible() and pane.agree_line.value() == first
    assert not pane.tabs.isTabEnabled(1)  # the prompt heatmap belongs to the prefill

    rows = _check_exports(pane, tmp_path, layers + 1)
    assert float(rows[1][1]) == pytest.approx(float(step.residual_norms[0]), rel=1e-6)
    assert rows[1][2] == "" and float(rows[3][2]) == pytest.approx(
        float(np.linalg.norm(step.attn_update[1])), rel=1e-6
    )
    assert rows[-1][4] == lens.top_texts[-1][0]

    # prefill: the heatmap image is the prompt lens' top-1 probability
    ran.request_select(0)
    prompt_lens = wait_result(qtbot, ran, "prompt_lens")
    wait_result(qtbot, ran, "lens", step=0, k=5)
    pane.render(ran.steps[0])
    assert pane.tabs.isTabEnabled(1)
    np.testing.assert_array_equal(pane.heat_image.image, prompt_lens.top1_probs)
    assert pane.heat_image.image.shape == (layers + 1, len(ran.prompt))
    hover = pane.hover_text(layers, 3)
    assert f"'{shown(prompt_lens.top1_texts[layers][3])}'" in hover
    assert f"'{shown(ran.prompt.tokens[3].text)}'" in hover
    assert pane.hover_text(layers + 1, 0) == ""

    # a prompt past PROMPT_LENS_TOKENS: not asked for, and the pane says why
    from llm_lens.desktop.panes import layers as layers_pane

    asked_long: list[str] = []
    request = ran.request_analysis
    monkeypatch.setattr(layers_pane, "PROMPT_LENS_TOKENS", 4)
    monkeypatch.setattr(
        ran, "request_analysis", lambda kind, **a: (asked_long.append(kind), request(kind, **a))[1]
    )
    pane._prompt_lens = None
    pane.render(ran.steps[0])
    assert "prompt_lens" not in asked_long and "up to 4 tokens" in pane.hover_label.text()
    monkeypatch.undo()

    # following a live run: no lens is asked for
    asked = []
    monkeypatch.setattr(ran, "request_analysis", lambda kind, **a: asked.append(kind))
    from dataclasses import replace

    ran.set_busy(True)
    ran.show_state(replace(ran.shown, follow_live=True))
    pane.render(ran.steps[4])
    assert asked == [] and WAIT_TEXT in pane.lens_status.text()
    assert pane.lens_table.rowCount() == 0  # the old step's lens is not shown for this one
    ran.set_busy(False)

    pane.render(None)
    assert _curve(pane.resid_curve)[1].size == 0 and pane.lens_table.rowCount() == 0


def test_kv_cache_plots_records_and_formula(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.kvcache import KVCachePane, human_bytes

    pane = KVCachePane(ran)
    qtbot.addWidget(pane)
    steps = ran.steps
    ran.request_select(1)
    pane.render(ran.current_step())

    tokens = np.array([s.kv.tokens for s in steps])
    measured = np.array([s.kv.bytes_total for s in steps])
    x, y = _curve(pane.measured_curve)
    np.testing.assert_array_equal(x, tokens)
    np.testing.assert_array_equal(y, measured)
    np.testing.assert_array_equal(_curve(pane.formula_curve)[1], measured)  # formula == measured
    np.testing.assert_array_equal(_curve(pane.mha_curve)[1], [s.kv.mha_bytes for s in steps])
    assert tokens[0] == len(ran.prompt) and np.all(np.diff(tokens) == 1)

    for index in (1, 0):
        step = steps[index]
        pane.render(step)
        per_layer = np.asarray(step.kv.per_layer)
        np.testing.assert_array_equal(pane.key_bars.opts["height"], per_layer[:, 0])
        np.testing.assert_array_equal(pane.value_bars.opts["height"], per_layer[:, 1])
        np.testing.assert_array_equal(pane.value_bars.opts["y0"], per_layer[:, 0])
        text = pane.formula_label.text()
        assert (
            f"2 × layers(30) × kv_heads(3) × head_dim(64) × bytes(4) × tokens({step.kv.tokens})"
            f" = {step.kv.formula_bytes:,} bytes" in text
        )
        assert f"measured: {step.kv.bytes_total:,} bytes, equal" in text
        assert "with full MHA (9 KV heads)" in text and "GQA 9:3 saves ×3" in text
        assert f"added this step: {human_bytes(step.kv.bytes_added)}" in text
        assert "CPU: device memory n/a" in text
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(3 * 2**20) == "3 MiB"

    # keys and values hold equal bytes in this model: tell them apart with a doctored record
    from dataclasses import replace

    from llm_lens.core.records import frozen

    odd = np.asarray(steps[1].kv.per_layer) * np.array([1, 2]) + np.arange(30)[:, None]
    pane.render(replace(steps[1], kv=replace(steps[1].kv, per_layer=frozen(odd))))
    np.testing.assert_array_equal(pane.key_bars.opts["height"], odd[:, 0])
    np.testing.assert_array_equal(pane.value_bars.opts["height"], odd[:, 1])
    np.testing.assert_array_equal(pane.value_bars.opts["y0"], odd[:, 0])

    rows = _check_exports(pane, tmp_path, len(steps))
    assert [int(r[2]) for r in rows[1:]] == list(measured)
    assert [int(r[4]) for r in rows[1:]] == list(measured)
    assert [int(r[3]) for r in rows[1:]] == [s.kv.bytes_added for s in steps]


def test_timing_bars_marker_and_click(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.timing import TimingPane

    pane = TimingPane(ran)
    qtbot.addWidget(pane)
    steps = ran.steps
    ran.request_select(len(steps) - 1)
    pane.render(ran.current_step())

    fwd = [s.timing.forward_ms for s in steps]
    own = {
        "forward": [s.timing.forward_ms - s.timing.forward_wait_ms for s in steps],
        "sample": [s.timing.sample_ms - s.timing.sample_wait_ms for s in steps],
        "capture": [s.timing.capture_ms - s.timing.capture_wait_ms for s in steps],
        "blocked": [s.timing.wait_ms - s.timing.queue_ms for s in steps],
        "queued": [s.timing.queue_ms for s in steps],
        "between": [s.timing.between_ms for s in steps],
    }
    bars = pane.bars
    base = np.zeros(len(steps))
    for key, heights in own.items():  # stacked in this order
        np.testing.assert_allclose(bars[key].opts["height"], heights)
        np.testing.assert_allclose(bars[key].opts["y0"], base)
        base = base + heights
    # the stack is each step's wall time: the loop's own total plus what happened between steps
    np.testing.assert_allclose(base, [s.timing.wall_ms for s in steps])
    np.testing.assert_allclose(
        base, [s.timing.total_ms + s.timing.between_ms for s in steps], rtol=1e-9
    )
    assert pane.marker.value() == len(steps) - 1
    summary = ran.summary
    assert f"TTFT {summary.ttft_ms:.1f} ms" in pane.stats_label.text()
    assert f"mean inter-token latency {summary.mean_itl_ms:.1f} ms" in pane.stats_label.text()
    assert f"prefill read {len(ran.prompt)} prompt tokens" in pane.explain_label.text()
    own = np.add(own["forward"], own["sample"])[1:] + np.array(own["capture"][1:])
    assert f"the model's own {own.mean():.1f} ms" in pane.stats_label.text()

    # selecting elsewhere moves the marker (through the controller's signal and the repaint)
    ran.request_select(2)
    qtbot.waitUntil(lambda: pane.marker.value() == 2, timeout=2000)

    # a click on the plot selects the step under it
    pane.resize(700, 450)
    pane.view.resize(700, 350)
    vb = pane.plot.vb
    vb.setRange(xRange=(-0.5, len(steps) - 0.5), padding=0)
    scene_pt = vb.mapViewToScene(QPointF(4, 1.0))
    widget_pt = pane.view.mapFromScene(scene_pt)
    qtbot.mouseClick(pane.view.viewport(), Qt.MouseButton.LeftButton, pos=widget_pt)
    qtbot.waitUntil(lambda: ran.selected == 4, timeout=2000)
    qtbot.waitUntil(lambda: pane.marker.value() == 4, timeout=2000)

    # dropping the dragged marker between steps selects the nearest and snaps onto it
    pane.marker.setValue(1.3)
    pane.marker.sigPositionChangeFinished.emit(pane.marker)
    assert ran.selected == 1 and pane.marker.value() == 1

    rows = _check_exports(pane, tmp_path, len(steps))
    assert [float(r[1]) for r in rows[1:]] == pytest.approx(fwd)
    assert [float(r[4]) for r in rows[1:]] == pytest.approx([s.timing.total_ms for s in steps])

    pane.render(None)
    assert len(bars["forward"].opts["height"]) == 0 and not pane.marker.isVisible()


def test_timing_says_when_the_waits_were_not_measured(qtbot, ran, tmp_path):
    """Where the records could not measure the model thread's waits (several torch threads, a
    GPU that sleeps the thread), the pane says so instead of showing 0 ms of waiting, and the
    CSV leaves those cells empty."""
    import dataclasses

    from llm_lens.desktop.panes.timing import PARTS, UNMEASURED, TimingPane

    unmeasured = [
        dataclasses.replace(s, timing=dataclasses.replace(s.timing, waits_measured=False))
        for s in ran.steps
    ]
    ran.show_state(dataclasses.replace(ran.shown, steps=tuple(unmeasured)))
    pane = TimingPane(ran)
    qtbot.addWidget(pane)
    pane.render(ran.current_step())
    text = pane.stats_label.text()
    assert UNMEASURED in text and "waiting for the GIL" not in text
    assert "the model's own" not in text and "mean: forward + sample + capture" in text
    names = [label.text for _, label in pane.plot.legend.items]
    assert names == ["forward", "sample", "capture", "between steps"]  # no empty colours
    rows = _check_exports(pane, tmp_path, len(unmeasured))
    assert [(r[5], r[6]) for r in rows[1:]] == [("", "")] * len(unmeasured)
    forward = [s.timing.forward_ms for s in ran.steps]
    assert [float(r[1]) for r in rows[1:]] == pytest.approx(forward)
    measured = [  # a later run that measured them: the colours come back, in order
        dataclasses.replace(s, timing=dataclasses.replace(s.timing, waits_measured=True))
        for s in unmeasured
    ]
    ran.show_state(dataclasses.replace(ran.shown, steps=tuple(measured)))
    pane.render(ran.current_step())
    names = [label.text for _, label in pane.plot.legend.items]
    assert names == [name for _, name, _ in PARTS]


def test_svg_export(qtbot, ran, tmp_path):
    from llm_lens.desktop.panes.kvcache import KVCachePane
    from llm_lens.desktop.panes.layers import LayerStackPane
    from llm_lens.desktop.panes.timing import TimingPane

    for cls in (LayerStackPane, KVCachePane, TimingPane):
        pane = cls(ran)
        qtbot.addWidget(pane)
        pane.render(ran.current_step())
        path = tmp_path / f"{cls.__name__}.svg"
        pane.export_image(path)
        assert ET.parse(path).getroot().tag.endswith("svg")


def test_byte_axis_ticks_in_binary_units(qtbot):
    import pyqtgraph as pg

    from llm_lens.desktop.panes.kvcache import ByteAxis, byte_axis

    widget = pg.PlotWidget(axisItems={"left": ByteAxis()})
    qtbot.addWidget(widget)
    plot = widget.getPlotItem()
    byte_axis(plot, 5.5 * 2**20)
    axis = plot.getAxis("left")
    levels = axis.tickValues(0, 6 * 2**20, 300)
    assert levels[0][1][:3] == [0.0, 2 * 2**20, 4 * 2**20]  # whole MiB, in bytes
    assert axis.tickStrings([2 * 2**20, 4 * 2**20], 1.0, 2 * 2**20) == ["2", "4"]
    assert axis.labelText == "MiB"
