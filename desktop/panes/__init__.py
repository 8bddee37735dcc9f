"""The panes of the main window: each shows one stage of the prompt-to-response journey."""
