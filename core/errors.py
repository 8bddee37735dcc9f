"""Errors a user can cause. Each carries a message meant to be shown as it is, never a traceback."""

from __future__ import annotations


class LensError(Exception):
    """Base of every error caused by user input (a model spec, a prompt, a setting, a file)."""


class ModelLoadError(LensError):
    """The model spec could not be turned into a loaded causal language model."""


class PromptError(LensError):
    """The prompt cannot be run (empty, or longer than the model's context)."""


class SamplingError(LensError):
    """A sampling setting is out of range."""


class Cancelled(LensError):
    """The user cancelled a long operation (a model load) before it finished."""
