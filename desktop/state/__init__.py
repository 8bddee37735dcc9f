"""What is shown and how to ask for more: the controller (the only way to the model thread), its
compare and session parts, the linked token selection and the pane repaint scheduler.
"""
