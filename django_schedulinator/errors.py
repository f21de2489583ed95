"""The app's errors: one base class, so a caller can catch everything the app refuses.

Every error a caller may catch lives here, importable from here only. A few that never leave
the feature that raises them (``contrib.sentry_monitors.Inexpressible``, caught by
``contrib.sentry``; ``importers.celery_beat.Unmapped``, ``probes.NoAnswer``;
``index.health.ShardsAway``, the sharded index's, a Redis ``ConnectionError`` too, caught as
an outage) stay there, and still derive from ``SchedulinatorError``; a test walks the
package for exceptions that do not.

This module imports nothing of the app: every other module may raise these.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ImproperlyConfigured


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


class PrunedRange(ServiceError):
    """A backfill covers occurrences whose runs retention may have deleted: whether they ran
    can no longer be told, so they are not run again unless the caller says so
    (``rerun_pruned``). ``through`` is how far the schedule's runs were pruned; ``first``
    and ``last`` the range's occurrences at stake, ``count`` how many."""

    def __init__(self, message: str, *, through: Any, first: Any, last: Any, count: int) -> None:
        super().__init__(message)
        self.through, self.first, self.last, self.count = through, first, last, count


class OutdatedZoneRules(SchedulinatorError, RuntimeError):
    """This process reads an older time-zone database than the one the next runs were
    planned with (``ZoneRules``): it must not plan (a scheduler refuses to claim)."""


class InvalidKey(SchedulinatorError, ValueError):
    """A report names something that is not an occurrence key (``"<schedule>:<epoch ms>"``)."""


class InvalidDispatcher(SchedulinatorError, ImproperlyConfigured):
    """A dispatcher alias cannot be built: its ``BACKEND`` cannot be imported or is not a
    ``BaseDispatcher``, or its ``OPTIONS`` are wrong. The message names the setting."""


class UnknownDispatcher(InvalidDispatcher):
    """A schedule or run names an alias that ``SCHEDULINATOR['DISPATCHERS']`` does not have."""

    def __init__(self, alias: str, configured: Iterable[str] = ()) -> None:
        super().__init__(
            f"{alias!r} is not a dispatcher alias (configured: {', '.join(sorted(configured))}); "
            "add it to SCHEDULINATOR['DISPATCHERS']."
        )
        self.alias = alias


class Unreachable(SchedulinatorError):
    """Raised by a dispatcher's ``send``: what it hands off to cannot be reached (a broker or
    a Redis that is down). This run and the rest of its batch are retried after the backoff,
    with the message as their error."""


class CommandRefused(SchedulinatorError):
    """The command task's command, or one of its arguments, is not in the allowlist
    (``SCHEDULINATOR['COMMANDS']``)."""


class CommandFailed(SchedulinatorError):
    """The command task's command exited with a status other than 0 (or raised); the message
    has its output only when its entry keeps it."""


class NotifyError(SchedulinatorError):
    """A notification was refused (a webhook target answered with an error)."""


class LedgerLayoutError(SchedulinatorError, ValueError):
    """``partition_runs`` cannot convert the ledger: its database is not PostgreSQL, or the
    ledger is in that layout already. Nothing was changed."""


def validation_message(exc: Any) -> str:
    """A Django ``ValidationError`` in one line: "field: message; other: message"."""
    if hasattr(exc, "error_dict"):
        return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
    return " ".join(exc.messages)
