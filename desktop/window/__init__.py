"""The main window: its docks and layout, the prompt panel and the session menu actions."""
