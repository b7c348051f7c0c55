"""The one base class of every error Speculens reports to a person.

``str(error)`` is the sentence the user reads: what went wrong and what to do. Code that shows errors (the
worker, the CLI, the model manager) catches :class:`SpeculensError` and shows its message; anything else is
a bug, logged with its traceback and reported as one. Each error keeps the built-in base its callers
already catch (``ValueError`` for bad input, ``RuntimeError`` for failures, ``LookupError`` for unknown
names), so the hierarchy only adds a common root.
"""

from __future__ import annotations


class SpeculensError(Exception):
    """An error whose message is written for the user."""

    @property
    def message(self) -> str:
        """The sentence to show."""
        return str(self)


class InvalidInputError(SpeculensError, ValueError):
    """A setting, a prompt or a file the user gave cannot be used; the message says which and why."""


class OperationError(SpeculensError, RuntimeError):
    """Something could not be done (a model would not load, a download failed); the message says why."""
