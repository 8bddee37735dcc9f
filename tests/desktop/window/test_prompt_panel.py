"""The response box shows what the model wrote, and never "\ufffd" for a character split over
tokens: the bytes stay visible (‹f0 9f›) until the character's last byte arrives."""

from __future__ import annotations

from dataclasses import replace

from llm_lens.core.sampling import GREEDY

REPLACEMENT = "\ufffd"
PIZZAS = "🍕🍕🍕🍕🍕🍕"  # raw, greedy: the bundled model writes 🍕 again, as three byte tokens


def _panel(qtbot, controller):
    from llm_lens.desktop.window.prompt_panel import PromptPanel

    panel = PromptPanel(controller, [{"title": "pizza", "text": PIZZAS, "chat": False}])
    qtbot.addWidget(panel)
    return panel


def _run(qtbot, controller, tokens):
    with qtbot.waitSignal(controller.sig_run_finished, timeout=120_000):
        controller.request_run(PIZZAS, False, GREEDY, tokens)


def test_a_split_emoji_shows_its_bytes_until_it_completes(qtbot, controller):
    panel = _panel(qtbot, controller)
    shown = []
    for tokens in (1, 2, 3, 4):
        _run(qtbot, controller, tokens)
        steps = controller.steps
        assert len(steps) == tokens
        raw = b"".join(s.token.raw for s in steps)
        shown.append(panel.response.toPlainText())
        assert REPLACEMENT not in shown[-1]
        whole = len(raw) - len(raw) % 4  # 🍕 is four bytes: the whole ones read as text
        tail = raw[whole:]
        assert shown[-1] == raw[:whole].decode() + (f"‹{tail.hex(' ')}›" if tail else "")
    # the model's own tokens split 🍕 (f0 9f 8d 95) two ways, and the box followed each piece
    assert shown == ["‹f0 9f›", "‹f0 9f 8d›", "🍕", "🍕‹f0 9f›"]


def test_response_characters_map_to_the_step_that_wrote_them(qtbot, controller):
    panel = _panel(qtbot, controller)
    _run(qtbot, controller, 4)
    text = panel.response.toPlainText()  # "🍕‹f0 9f›": step 3's bytes shown as 7 characters
    # 🍕 stands from step 2 (its last byte) on; the bytes shown after it are step 3's
    assert [panel.response_step(i) for i in range(len(text))] == [2] + [3] * 7
    assert panel.response_step(len(text)) == -1


def test_a_streamed_token_adds_to_the_box_keeping_the_readers_place(qtbot, controller):
    """Each step's text is added where the last ended: the box reads the run's text after every
    step; scrolled to its end it follows the new text, scrolled up it stays, and a selection
    made while the run streams stays selected."""
    from PySide6.QtGui import QTextCursor

    from llm_lens.core.records import generated_text

    panel = _panel(qtbot, controller)
    panel.resize(260, 120)
    panel.show()
    qtbot.waitExposed(panel)
    with qtbot.waitSignal(controller.sig_run_finished, timeout=120_000):
        controller.request_run("Write a long story about a dragon.", True, GREEDY, 48)
    steps = list(controller.steps)
    box, bar = panel.response, panel.response.verticalScrollBar()
    panel._on_run_started(None)
    for k in range(1, len(steps) + 1):  # as the controller's flushes announce them
        controller.show_state(replace(controller.shown, steps=tuple(steps[:k])))
        panel._on_steps()
        assert box.toPlainText() == generated_text([s.token for s in steps[:k]])
        if k == 24:
            assert 0 < bar.maximum() == bar.value()  # longer than the box: it followed
            bar.setValue(0)  # the reader scrolls up, and selects the first word
            cursor = box.textCursor()
            cursor.setPosition(0)
            cursor.movePosition(
                QTextCursor.MoveOperation.EndOfWord, QTextCursor.MoveMode.KeepAnchor
            )
            box.setTextCursor(cursor)
            selected = cursor.selectedText()
    assert bar.value() == 0 < bar.maximum()
    assert selected and box.textCursor().selectedText() == selected


def test_a_box_position_maps_to_the_character_after_a_character_outside_the_bmp():
    from llm_lens.desktop.window.prompt_panel import _char_index, _utf16_len

    text = "a🍕b‹f0›c"
    for i in range(len(text) + 1):
        assert _char_index(text, _utf16_len(text[:i])) == i
    assert _utf16_len("🍕") == 2


def test_streamed_pieces_build_the_box_a_whole_text_would(qtbot, controller):
    """Tokens that split a "\\r\\n", end in a character's first bytes, or bring a character
    outside the BMP: the box streamed a token at a time holds what setting the whole text
    at once gives (Qt makes "\\r\\n" one line break, and 🍕 two positions)."""
    from types import SimpleNamespace

    from PySide6.QtWidgets import QTextBrowser

    from llm_lens.core.records import TokenInfo

    pieces = [b"a\r", b"\nb", b"\xf0\x9f", b"\x8d\x95c\r", b"d", b"\r\n", b"\xf0\x9f\x8d\x95"]
    steps = [
        SimpleNamespace(token=TokenInfo(i, raw.decode(errors="replace"), raw), index=i, prob=1.0)
        for i, raw in enumerate(pieces)
    ]
    panel = _panel(qtbot, controller)
    panel._on_run_started(None)
    whole = QTextBrowser()
    qtbot.addWidget(whole)
    for k in range(1, len(steps) + 1):
        controller.show_state(replace(controller.shown, steps=tuple(steps[:k])))
        panel._on_steps()
        whole.setPlainText(panel._response_text(steps[:k]))
        assert panel.response.toPlainText() == whole.toPlainText()
        assert panel.response.document().characterCount() == whole.document().characterCount()
    assert panel.response.toPlainText() == "a\nb🍕c\nd\n🍕"
    from llm_lens.desktop.window.prompt_panel import _char_index, _utf16_len

    text = panel.response.toPlainText()
    positions = [_utf16_len(text[:i]) for i in range(len(text))]  # where the pointer may be
    wrote = [panel.response_step(_char_index(text, at)) for at in positions]
    assert wrote == [0, 0, 1, 3, 3, 3, 4, 5, 6]  # "\r" stood as a line break from its step
