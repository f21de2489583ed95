"""What every service writes with: who acts when code does not say (``PYTHON``), the fields
an action or an update writes to the row, the row locked as it is now (``_locked``), the
version check of an edit, the caller's instance taking what was written (``_adopt``), the
change-log entry (``_record``), and the wake of the schedulers once queued runs commit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import router, transaction

from django_schedulinator.errors import ScheduleDeleted, VersionConflict
from django_schedulinator.index.due import get_index
from django_schedulinator.models import Schedule, ScheduleChange
from django_schedulinator.services import changelog
from django_schedulinator.services.changelog import Origin

logger = logging.getLogger("django_schedulinator.services")

# Who acts when code calls a service without saying.
PYTHON = Origin(None, ScheduleChange.Source.PYTHON)

# What pause, resume and run now write to the row: the caller's instance takes these
# afterwards, and keeps its other values as they were (unsaved edits included).
WRITTEN_BY_ACTIONS = (
    "enabled", "pause_note", "paused_at", "next_run_at", "due_at", "fired_through",
    "revision", "version", "updated_at",
)  # fmt: skip
# What an update writes: every setting, and what follows from them.
WRITTEN_BY_UPDATE = (*Schedule.SETTINGS_FIELDS, *WRITTEN_BY_ACTIONS)


def _db(schedule: Schedule) -> str:
    return router.db_for_write(type(schedule), instance=schedule)


def _locked(schedule: Schedule, db: str) -> Schedule:
    """The schedule's row as it is now, locked until the transaction ends."""
    if schedule.pk is None:
        raise ScheduleDeleted("Save the schedule first.")
    try:
        return type(schedule).objects.using(db).select_for_update().get(pk=schedule.pk)
    except Schedule.DoesNotExist:
        raise ScheduleDeleted("The schedule was deleted.") from None


def _check_version(current: Schedule, expected: int | None) -> None:
    if expected is not None and current.version != expected:
        raise VersionConflict(
            f"The schedule changed since you read it: it is at version {current.version}, "
            f"not {expected}. Read it again and apply your change to it.",
            current=current.version,
        )


def _adopt(schedule: Schedule, current: Schedule, written: Sequence[str]) -> None:
    """The caller's instance takes what was written to the row, as saved."""
    if schedule is not current:
        schedule.take_saved(current, written)


def _record(
    schedule: Schedule, origin: Origin, action: str, changes: dict[str, Any] | None, db: str
) -> None:
    changelog.record(schedule, origin, action, changes, using=db)


def _wake_after_commit(db: str, schedule_id: int) -> None:
    def wake() -> None:
        try:
            get_index().wake([schedule_id])  # its shard's schedulers' next claim
        except Exception:  # the runs are committed; a periodic take-over finds them anyway
            logger.warning(
                "Could not wake the schedulers; the queued runs start within a quarter of a lease.",
                exc_info=True,
            )

    transaction.on_commit(wake, using=db)
