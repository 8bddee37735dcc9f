"""desktop.panes.kvcache on a model spread by a device map: the pane says where the weights sit
and the cache's bytes per device (doctored records of the real run: no second model loaded)."""

from __future__ import annotations

from dataclasses import replace


def test_kv_pane_says_where_a_split_models_weights_and_cache_sit(qtbot, ran, monkeypatch):
    from llm_lens.desktop.panes.kvcache import KVCachePane

    pane = KVCachePane(ran)
    qtbot.addWidget(pane)
    step = ran.current_step()
    pane.render(step)
    text = pane.formula_label.text()
    assert "KV cache:" not in text and "disk" not in text  # one device: nothing more said
    split = (("model.layers.0", "cpu", 2_000_000), ("model.layers.1", "disk", 3_000_000))
    info = replace(ran.info, placement=split)
    with monkeypatch.context() as patch:
        patch.setattr(type(ran), "info", property(lambda _self: info))
        kv = replace(step.kv, by_device=(("cuda:0", 1_500_000), ("cuda:1", 500_000)))
        pane.render(replace(step, kv=kv))
    text = pane.formula_label.text()
    assert "KV cache: cuda:0 1.5 MB · cuda:1 0.5 MB" in text
    assert "cpu: layer 0 (2 MB) · disk: layer 1 (3 MB)" in text
