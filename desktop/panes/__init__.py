"""The panes of the main window: each shows one stage of the prompt-to-response journey.

Each pane module (or package) holds its pane's whole story: its drawing, the token it marks,
its hover text and its card (the hooks of :class:`~llm_lens.desktop.widgets.pane.Pane`). The
panes are independent of each other (an import-linter contract): what two panes share, token
text, bars, marks, the card, lives in :mod:`llm_lens.desktop.widgets`.
"""
