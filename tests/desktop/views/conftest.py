"""The window the Beam, Branches and Compare view tests open their views from: the bundled
model loaded, the article's prompt typed in, chat on."""

from __future__ import annotations

import pytest

PROMPT = "Explain transformers like I am 12"


@pytest.fixture
def window(loaded_window):
    """The loaded window with PROMPT in the prompt box and the chat template on."""
    loaded_window.prompt_panel.editor.setPlainText(PROMPT)
    loaded_window.prompt_panel.chat_box.setChecked(True)
    return loaded_window
