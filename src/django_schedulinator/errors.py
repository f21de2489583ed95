"""The app's errors: one base class, so a caller can catch everything the app refuses.

This module imports nothing of the app: every other module may raise these.
"""

from __future__ import annotations

from typing import Any


class SchedulinatorError(Exception):
    """Base of every error the app raises on purpose."""


class TimingError(SchedulinatorError, ValueError):
    """A schedule's timing cannot be evaluated (bad cron, zone or interval)."""


class UnknownTask(SchedulinatorError, LookupError):
    """A task name is not in the registry."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name!r} is not a registered task")
        self.name = name


class InvalidArguments(SchedulinatorError, ValueError):
    """A run's stored args or kwargs cannot be passed to a task."""


class TaskTimedOut(SchedulinatorError, TimeoutError):
    """A task ran past its timeout and was stopped (an async task is cancelled)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"Timed out after {seconds:g}s and was cancelled.")
        self.seconds = seconds


class RebuildInProgress(SchedulinatorError, RuntimeError):
    """Another process holds the rebuild lock of the due index."""


class ServiceError(SchedulinatorError, ValueError):
    """A change cannot be made as asked; the message says why (see ``services``)."""


class ScheduleDeleted(ServiceError):
    """The schedule was deleted (or never saved) before the change could be made."""


class DeclaredInCode(ServiceError):
    """The change would alter the definition of a schedule declared in code, or delete it:
    that is done in the code (pause, resume and run now work here)."""


class VersionConflict(ServiceError):
    """The schedule's settings changed since the caller read them: the edit is refused
    instead of overwriting the newer one. ``current`` is the version the row holds now."""

    def __init__(self, message: str, *, current: int) -> None:
        super().__init__(message)
        self.current = current


def validation_message(exc: Any) -> str:
    """A Django ``ValidationError`` in one line: "field: message; other: message"."""
    if hasattr(exc, "error_dict"):
        return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
    return " ".join(exc.messages)
