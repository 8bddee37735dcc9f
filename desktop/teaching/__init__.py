"""What teaches: the how-to-read cards, hover text, linked selection between panes, legends and
tooltips, and the first-run tour.
"""
