"""Patching sweep maps: the residual and head heatmaps of a sweep (:mod:`.maps`)."""
