"""Building blocks every pane and view shares: the Pane base class and its public hooks, token
text (visible whitespace, chips), probability bars, selection marks, the "how to read this" card,
the attribution flow view, layouts and labels, the theme and the resources folder.
"""
