"""What the re-plans share (after a change of a calendar's days, or of the time-zone
rules): the schedules that name a calendar, and the writing of what a re-plan decided, in
a few statements whatever the number of schedules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import F

from django_schedulinator.index import sync
from django_schedulinator.models import Schedule, ScheduleChange
from django_schedulinator.models.batches import json_ids, json_time, per_row
from django_schedulinator.services import changelog
from django_schedulinator.services.changelog import Origin


@dataclass(slots=True)
class _Replanned:
    """What a re-plan decided for one schedule, locked: the fields to write, and the
    change-log entry's changes when its next run moved (None: no entry)."""

    schedule: Schedule
    fields: dict[str, Any]
    logged: dict[str, Any] | None = None


def _write_replanned(
    replanned: Sequence[_Replanned], reading: Iterable[int], origin: Origin, db: str
) -> int:
    """Write what re-plans decided, in a few statements whatever their number (a calendar
    that thousands of schedules name): the fields of those that change, each row its own
    values, in one UPDATE that moves their counters as a save does (``change``); the
    revision alone of the other schedules whose plan reads what changed (``reading``), so
    that a claim that planned with the old input loses its conditional advance; the
    change-log entries, in one insert; and the index follows on commit. How many next runs
    moved."""
    written = [r for r in replanned if r.fields]
    if written:
        ids = [r.schedule.pk for r in written]
        connection = connections[db]
        names = sorted({name for r in written for name in r.fields})
        values = {
            name: per_row(
                Schedule,
                name,
                {
                    r.schedule.pk: _json_value(
                        connection, r.fields.get(name, getattr(r.schedule, name))
                    )
                    for r in written
                },
                db,
            )
            for name in names
        }
        Schedule.objects.using(db).filter(pk__in=json_ids(ids, db)).change(**values)
        sync.resync_on_commit(ids, using=db)
        for r in written:  # as the rows hold them now (the lock is still ours)
            for name, value in r.fields.items():
                setattr(r.schedule, name, value)
            r.schedule.version += 1
            r.schedule.revision += 1
    others = sorted(set(reading) - {r.schedule.pk for r in written})
    if others:
        Schedule.objects.using(db).filter(pk__in=json_ids(others, db)).update(
            revision=F("revision") + 1
        )
    logged = [(r.schedule, r.logged) for r in written if r.logged is not None]
    changelog.record_many(logged, origin, ScheduleChange.Action.REPLANNED, using=db)
    return len(logged)


def _json_value(connection: Any, value: Any) -> Any:
    """A field's value as ``per_row`` carries it: instants as the database reads them."""
    if isinstance(value, datetime):
        return json_time(connection, value)
    return value


def _ids_naming(name: str, db: str) -> list[int]:
    """The ids of the schedules whose calendars include ``name``: a JSON containment query
    where the database has one (PostgreSQL), else read in Python."""
    rows = Schedule.objects.using(db)
    if connections[db].features.supports_json_field_contains:
        return list(rows.filter(calendars__contains=[name]).values_list("pk", flat=True))
    named = rows.exclude(calendars=[]).values_list("pk", "calendars")
    return [pk for pk, names in named.iterator(chunk_size=2000) if name in (names or ())]
