"""desktop.widgets.theme: the dark palette sets light text on dark ground in every role."""

from __future__ import annotations

from PySide6.QtGui import QPalette

from llm_lens.desktop.widgets.theme import dark_palette


def test_text_is_light_on_a_dark_ground():
    p = dark_palette()
    role = QPalette.ColorRole
    assert p.color(role.Window).name() == "#202124" and p.color(role.Text).name() == "#e8eaed"
    pairs = [
        (role.Window, role.WindowText),
        (role.Base, role.Text),
        (role.Button, role.ButtonText),
        (role.Highlight, role.HighlightedText),
    ]
    for ground, ink in pairs:
        assert p.color(ink).lightness() - p.color(ground).lightness() > 100, (ground, ink)
