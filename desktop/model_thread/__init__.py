"""The model's thread: the Qt adapter that runs core's jobs on one long-lived QThread and relays
their records as signals.
"""
