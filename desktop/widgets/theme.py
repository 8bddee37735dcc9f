"""A dark palette for Fusion, used when the system asks for a dark colour scheme."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette


def dark_palette() -> QPalette:
    p = QPalette()
    role = QPalette.ColorRole
    colours = {
        role.Window: "#202124",
        role.WindowText: "#e8eaed",
        role.Base: "#171717",
        role.AlternateBase: "#2a2b2e",
        role.ToolTipBase: "#2a2b2e",
        role.ToolTipText: "#e8eaed",
        role.Text: "#e8eaed",
        role.Button: "#2d2e31",
        role.ButtonText: "#e8eaed",
        role.BrightText: "#ff6b6b",
        role.Highlight: "#3d7bd9",
        role.HighlightedText: "#ffffff",
        role.Link: "#8ab4f8",
        role.PlaceholderText: "#9aa0a6",
    }
    for r, c in colours.items():
        p.setColor(r, QColor(c))
    return p
