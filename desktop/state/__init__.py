"""What is shown and how to ask for more: the controller, which owns the shown value (Shown)
and, with its compare and session parts, is the one room that talks to the model thread; the
linked token selection and the pane repaint scheduler.
"""
