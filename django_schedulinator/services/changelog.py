"""The audit trail: who changed a schedule, when, through what (admin, API, command) and how.

The admin, the API and ``manage.py schedule`` call :func:`record` in the transaction of the
change itself, so a change and its record commit together or not at all. ``changes`` holds
``{field: [before, after]}`` for edits, with values as JSON (times in ISO 8601, durations
in seconds), so the trail can be read without the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

    from django_schedulinator.models import Schedule, ScheduleChange


@dataclass(frozen=True, slots=True)
class Origin:
    """Who asks for a change, and through what: recorded with it in the trail."""

    user: AbstractBaseUser | AnonymousUser | None
    source: str  # a ScheduleChange.Source


def as_json(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, datetime) and value.utcoffset() is not None:
        return value.astimezone(UTC).isoformat()  # one instant, one text, whatever the zone
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def snapshot(schedule: Schedule | None) -> dict[str, Any]:
    """The tracked fields of a schedule as JSON values ({} for none)."""
    if schedule is None:
        return {}
    return {name: as_json(getattr(schedule, name)) for name in schedule.SETTINGS_FIELDS}


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """``{field: [before, after]}`` for each tracked field whose value differs."""
    from django_schedulinator.models import Schedule

    return {
        name: [before.get(name), after.get(name)]
        for name in Schedule.SETTINGS_FIELDS
        if before.get(name) != after.get(name)
    }


def record_many(
    entries: Sequence[tuple[Schedule, dict[str, Any]]],
    origin: Origin,
    action: str,
    *,
    using: str | None = None,
) -> None:
    """Write one entry per (schedule, changes), in one insert (a re-plan of thousands)."""
    from django_schedulinator.models import ScheduleChange

    if entries:
        ScheduleChange.objects.using(using).bulk_create(
            [_entry(schedule, origin, action, changes) for schedule, changes in entries]
        )


def record(
    schedule: Schedule,
    origin: Origin,
    action: str,
    changes: dict[str, Any] | None = None,
    *,
    using: str | None = None,
) -> ScheduleChange:
    """Write one entry of the trail. ``schedule`` may be deleted already (its name stays)."""
    entry = _entry(schedule, origin, action, changes)
    entry.save(using=using)
    return entry


def _entry(
    schedule: Schedule, origin: Origin, action: str, changes: dict[str, Any] | None
) -> ScheduleChange:
    from django_schedulinator.models import Schedule, ScheduleChange

    actor = origin.user
    user = actor if actor is not None and actor.is_authenticated else None
    exists = schedule.pk is not None and action != ScheduleChange.Action.DELETED
    version = schedule.version if isinstance(schedule.version, int) else None
    return ScheduleChange(
        schedule=schedule if exists else None,
        schedule_name=schedule.name[: Schedule._meta.get_field("name").max_length or 200],
        actor_id=user.pk if user is not None else None,
        actor_name=user.get_username() if user is not None else "",
        source=origin.source,
        action=action,
        changes=changes or {},
        version=version,
    )
