"""desktop.teaching.tour: the tour visits every pane with the shown run's own numbers."""

from __future__ import annotations

import html


def test_the_tour_visits_every_pane(qtbot, shown):
    ctl = shown.controller
    tour = shown.open_tour()
    assert tour.visited == ["Tokens"] and ctl.token < len(ctl.prompt) and ctl.selected == 0
    said = []
    for _ in range(len(tour.stops) - 1):
        tour.next.click()
        said.append(tour.text.text())
        if tour.visited[-1] == "Attention":
            assert ctl.token == len(ctl.prompt) - 1
            assert html.escape(shown.cards["Attention"].explainer.headline) in said[-1]
    assert set(tour.visited) == set(shown.panes)
    assert ctl.selected == len(ctl.steps) - 1  # the last stops look at the whole run
    step = ctl.steps[-1]
    assert (
        f"{step.kv.formula_bytes:,} bytes" in said[tour.visited.index("KV cache") - 1]
    )  # the KV cache stop's own numbers
    tour.close()


def test_the_tour_has_a_stop_for_every_pane_of_the_journey():
    from llm_lens.desktop.teaching.tour import STOPS
    from llm_lens.desktop.window.window_layout import JOURNEY

    titles = [title for title, _ in STOPS]
    assert sorted(titles) == sorted(JOURNEY) and len(set(titles)) == len(titles)
    assert [t for t, _ in STOPS[:4]] == ["Tokens", "Embeddings", "Positions", "Attention"]
    assert all(text.strip() for _, text in STOPS)
