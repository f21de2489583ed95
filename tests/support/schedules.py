"""Schedules for the tests: one saved (signals fire), many written in bulk, the fields
of a valid one."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils import timezone

from django_schedulinator.index import clock
from django_schedulinator.models import Schedule

from .commits import committed


def make_schedule(name: str | None = None, **fields: Any) -> Schedule:
    """A saved and indexed schedule (signals fire, and their index write runs as its commit
    would: ``committed``; the change log records nothing): saved as code that
    bypasses ``services.create`` must (docs/concepts.md#saving-a-schedule-yourself), its
    first run decided at the schedulers' clock unless next_run_at says otherwise."""
    fields.setdefault("task", "tests.record")
    fields.setdefault("kind", Schedule.Kind.INTERVAL)
    if fields["kind"] == Schedule.Kind.INTERVAL:
        fields.setdefault("interval", timedelta(hours=1))
    if fields["kind"] == Schedule.Kind.CRON:
        fields.setdefault("cron", "0 * * * *")
    schedule = Schedule(name=name or f"s-{uuid.uuid4().hex[:10]}", **fields)
    schedule.set_first_run(clock.now())
    with committed(), transaction.atomic():
        schedule.save()
        schedule.jitter_first_run(DEFAULT_DB_ALIAS)
    return schedule


def make_due(count: int, *, seconds_ago: int = 5, **fields: Any) -> list[int]:
    """``count`` schedules due ``seconds_ago``, written in bulk like a data migration would."""
    due = timezone.now() - timedelta(seconds=seconds_ago)
    fields.setdefault("task", "tests.record")
    fields.setdefault("kind", Schedule.Kind.INTERVAL)
    fields.setdefault("interval", timedelta(hours=1))
    rows = [
        Schedule(
            name=f"bulk-{uuid.uuid4().hex[:12]}", next_run_at=due.replace(microsecond=0), **fields
        )
        for _ in range(count)
    ]
    created = Schedule.objects.bulk_create(rows)
    ids = (
        [s.pk for s in created]
        if created[0].pk
        else list(
            Schedule.objects.filter(name__in=[r.name for r in rows]).values_list("pk", flat=True)
        )
    )
    return ids


def model_fields(**overrides: Any) -> dict[str, Any]:
    """The fields of a valid cron schedule, with ``overrides``."""
    fields: dict[str, Any] = {
        "name": "nightly",
        "task": "tests.record",
        "kind": "cron",
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
    }
    fields.update(overrides)
    return fields
