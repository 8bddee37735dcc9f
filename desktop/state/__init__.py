"""What is shown and how to ask for more: the controller (the only way to the model thread) and
its parts (the link to the model thread, the analysis requests, compare and sessions), the
linked token selection and the pane repaint scheduler.
"""
