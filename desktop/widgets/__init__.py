"""Building blocks every pane and view shares: the Pane base class and its public hooks, layouts
and labels, the theme and the resources folder.
"""
