"""Checks that bound the work a hostile or careless input can cause before it is done: model
files read only when they are regular files of sane size, a config's and a GGUF's size claims
held against the files, chat templates rendered under limits, the weights loaded exactly
(nothing missing, unexpected or of another shape unless the user allows it) and named by a
hash of their bytes."""
