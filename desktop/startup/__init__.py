"""Start-up: the QApplication, its theme and process tuning, the Qt library check and the self-
test.
"""
